#include "kernels/cpu/output_amax.h"

#include "kernels/bf16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/fp8.h"

namespace ptrain::kernels::cpu {

OutputAmax::OutputAmax(Buf amax, Buf out, std::int64_t chunks) : amax_(amax), dtype_(out.dtype) {
  if (amax_) chunk_max_.assign(static_cast<std::size_t>(chunks), 0.0f);
}

void OutputAmax::fold(std::int64_t i, const float* y, std::int64_t n) {
  if (amax_) chunk_max_[static_cast<std::size_t>(i)] = kernels::abs_max(y, n);
}

void OutputAmax::write() const {
  if (!amax_) return;
  const float m = kernels::abs_max(chunk_max_.data(), static_cast<std::int64_t>(chunk_max_.size()));
  *f32(amax_) = dtype_ == DType::BF16 ? bf16_to_f32(f32_to_bf16(m)) : m;
}

}  // namespace ptrain::kernels::cpu
