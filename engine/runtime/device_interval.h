// The device's own seconds between two points of the host's program, where the backend keeps a
// timeline of its own (kernels::Ops::record_marker: CUDA events on the compute stream). On CUDA
// the host only enqueues, so its clock says when work was issued, not how long the device spent on
// it. Construction and end() enqueue a marker each; seconds(), once the host has waited for the
// device past end() for its own reasons (no wait of its own in the step), gives the device's time
// between them, or nullopt where the backend has no timeline (the CPU: its ops run on the host's
// thread, whose clock is the answer). The markers go back on destruction.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/ops.h"

namespace ptrain::runtime {

class DeviceInterval {
 public:
  explicit DeviceInterval(const kernels::Ops& ops) : ops_(ops), from_(ops.record_marker()) {}
  ~DeviceInterval() {
    ops_.release_marker(from_);
    ops_.release_marker(to_);
  }
  DeviceInterval(const DeviceInterval&) = delete;
  DeviceInterval& operator=(const DeviceInterval&) = delete;

  void end() {
    if (from_ != 0 && to_ == 0) to_ = ops_.record_marker();
  }
  std::optional<double> seconds() const {
    if (from_ == 0 || to_ == 0) return std::nullopt;
    return ops_.marker_seconds(from_, to_);
  }

 private:
  const kernels::Ops& ops_;
  std::uint64_t from_;
  std::uint64_t to_ = 0;
};

}  // namespace ptrain::runtime
