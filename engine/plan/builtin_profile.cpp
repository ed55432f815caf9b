#include "engine/plan/builtin_profile.h"

#include <stdexcept>

#include "engine/plan/builtin_profile_json.h"
#include "engine/plan/profile_transfer.h"

namespace ptrain::plan {

std::shared_ptr<const MeasuredProfile> builtin_profile(const HardwareProfile& gpu) {
  if (gpu.device_is_host()) return nullptr;
  static const MeasuredProfile measured = [] {
    MeasuredProfile p = from_json(kBuiltinH100ProfileJson);
    const HardwareProfile* on = measured_hardware(p);
    if (on == nullptr || on->device_is_host())
      throw std::invalid_argument("it measured " + p.device + ", not a GPU with a datasheet entry");
    p.built_in = true;
    return p;
  }();
  const HardwareProfile& measured_on = *measured_hardware(measured);
  if (gpu.name == measured_on.name) return std::make_shared<const MeasuredProfile>(measured);
  return std::make_shared<const MeasuredProfile>(transfer_profile(measured, measured_on, gpu));
}

}  // namespace ptrain::plan
