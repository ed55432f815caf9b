// Host memory page-locked for a device backend's copies (kernels::Ops::pin_host) while this lives:
// the optimizer offload's host buffers, which cross to and from the device every step.
#pragma once

#include <cstddef>
#include <utility>

#include "kernels/ops.h"

namespace ptrain::runtime {

class PinnedRange {
 public:
  PinnedRange(const kernels::Ops& device, void* host, std::size_t bytes) : device_(&device), host_(host) {
    device.pin_host(host, bytes);
  }
  PinnedRange(PinnedRange&& other) noexcept
      : device_(other.device_), host_(std::exchange(other.host_, nullptr)) {}
  PinnedRange& operator=(PinnedRange&&) = delete;
  PinnedRange(const PinnedRange&) = delete;
  PinnedRange& operator=(const PinnedRange&) = delete;
  ~PinnedRange() {
    if (host_ != nullptr) device_->unpin_host(host_);
  }

 private:
  const kernels::Ops* device_;
  void* host_;
};

}  // namespace ptrain::runtime
