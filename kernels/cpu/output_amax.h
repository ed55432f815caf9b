// The `amax` an op writes beside its output (ops.h: what abs_max over the stored output would
// leave), taken in the op's own pass: each chunk of rows or elements folds its values' largest |y|
// while they are in cache, and write() combines the chunks in their order (a max is exact; NaN is
// kept whatever the order) and puts the result in the output's dtype. A BF16 output is rounded
// from the F32 values the kernel wrote (bf16_staging.h); rounding to nearest is monotonic and
// symmetric, so the rounded maximum is the maximum of the rounded values.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/buffer.h"

namespace ptrain::kernels::cpu {

class OutputAmax {
 public:
  // amax null: every call does nothing. out: the output (its dtype), split into `chunks` parts.
  OutputAmax(Buf amax, Buf out, std::int64_t chunks);
  // Chunk i's values y[0, n) as the kernel wrote them (F32), each chunk from one thread.
  void fold(std::int64_t i, const float* y, std::int64_t n);
  void write() const;

 private:
  Buf amax_;
  DType dtype_;
  std::vector<float> chunk_max_;
};

}  // namespace ptrain::kernels::cpu
