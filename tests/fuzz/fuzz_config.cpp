// libFuzzer entry for the job-spec loader: the input is tried as a whole job file (alone, with
// fixed --set sets, with a --world), and as the value of a --set. Whatever the bytes, load_string
// must return: no crash, throw, leak, hang or unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/loader.h"

namespace {

const std::vector<ptrain::config::LoadOptions>& option_sets() {
  static const std::vector<ptrain::config::LoadOptions> sets = {
      {},
      {{"parallel.tp=2", "optimizer.betas=[0.9,0.99]", "model.moe.experts=4", "data.valid="}, std::nullopt},
      {{"cluster={nodes: 2, gpus_per_node: 4}", "parallel.pp=2", "schedule.layers_per_stage=[6,6]"}, 8},
  };
  return sets;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const ptrain::config::LoadOptions& options : option_sets()) {
    ptrain::config::load_string(text, "fuzz.yaml", options);
  }
  ptrain::config::LoadOptions as_override;
  as_override.overrides = {"model=" + text, text};
  ptrain::config::load_string("name: fuzz\n", "fuzz.yaml", as_override);
  return 0;
}
