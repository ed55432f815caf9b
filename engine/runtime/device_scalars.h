// A row of F32 values in a backend's memory for ops to reduce into (Ops::sum, Ops::sum_squares), read
// back together in one copy: how a step gets its microbatches' losses and its units' gradient norms
// to the host while waiting for the device once.
#pragma once

#include <vector>

#include "engine/runtime/owned_buffer.h"
#include "kernels/ops.h"

namespace ptrain::runtime {

class DeviceScalars {
 public:
  DeviceScalars(const kernels::Ops& memory, int count);

  int size() const { return static_cast<int>(values_.size()); }
  kernels::Buf at(int i) const;  // the i-th value (std::out_of_range past size())
  // The sum of values [0, count), in double; waits for the device (everything enqueued so far).
  double read_sum(int count) const;

 private:
  const kernels::Ops& memory_;
  OwnedBuffer values_;
  mutable std::vector<float> host_;
};

}  // namespace ptrain::runtime
