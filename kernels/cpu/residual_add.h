// The residual add of the fused add + norm ops (add_layernorm_forward, add_rmsnorm_forward): x_out =
// a + b, applied by the norm's row loop to each row just before the norm reads it, so the rows are
// walked once and each is still in cache when it is normalised.
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cpu/bf16_staging.h"

namespace ptrain::kernels::cpu {

class ResidualAdd {
 public:
  // Stages x_out (written) and a, b (read), n values each, in `staging`, which must outlive this.
  ResidualAdd(Bf16Staging& staging, Buf x_out, Buf a, Buf b, std::int64_t n);

  // The staged x_out: the sums, the norm's input.
  const float* sums() const { return sums_; }

  // x_out[i] = a[i] + b[i] for i in [begin, begin + count). When x_out is stored as BF16 each sum is
  // rounded to its bf16 value here, so the norm reads what it would read back from the stored x_out
  // (the staging's write-back then stores it exactly).
  void apply(std::int64_t begin, std::int64_t count) const;

 private:
  float* sums_;
  const float* a_;
  const float* b_;
  bool bf16_sums_;
};

}  // namespace ptrain::kernels::cpu
