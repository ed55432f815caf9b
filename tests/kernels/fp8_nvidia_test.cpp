// kernels/fp8.h's narrowing against NVIDIA's own: the host conversion of cuda_fp8.h
// (__nv_cvt_float_to_fp8 with __NV_SATFINITE, what the GPU's cvt.rn.satfinite computes) over a sweep
// of float32 bit patterns, both formats. Built where the CUDA toolkit is; needs no GPU. (Run once
// over all 2^32 inputs on 2026-12-06: no difference.)
#include <cuda_fp8.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>

#include "kernels/fp8.h"

TEST_CASE("FP8 narrowing equals NVIDIA's cvt.rn.satfinite over a sweep of float32 inputs", "[fp8]") {
  using ptrain::kernels::Fp8Format;
  constexpr std::uint64_t kStride = 257;  // prime to every field width: all exponents, mantissa patterns
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const __nv_fp8_interpretation_t nv = format == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
    std::uint64_t compared = 0, different = 0;
    for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += kStride) {
      const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
      const auto want = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, nv));
      if (ptrain::kernels::f32_to_fp8(x, format) != want) ++different;
      ++compared;
    }
    INFO(ptrain::kernels::to_string(format) << ": " << different << " of " << compared << " differ");
    CHECK(different == 0);
  }
}
