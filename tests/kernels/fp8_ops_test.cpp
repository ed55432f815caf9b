// The FP8 ops (abs_max, fp8_round) against kernels/fp8.h element by element, in F32 and BF16, and the
// claim the FP8 emulation rests on: a linear layer over fp8_round's operands computes exactly what an
// FP8 GEMM with per-tensor scales does, sum(qa * qb) / (sa * sb), up to the order of the sums.
#include "kernels/fp8.h"
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using ptrain::kernels::DType;
using ptrain::kernels::Fp8Format;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("abs_max: the largest magnitude, combined with what amax held, NaN kept", "[fp8]") {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    Vec values = random_vec(100000, 7, -3.0f, 2.0f);
    values[77777] = -9.5f;
    HostTensor x(values, dtype);
    float amax = 123.0f;
    ops().abs_max(scalar(amax), x.buf(), 100000, false);
    CHECK(amax == 9.5f);
    ops().abs_max(scalar(amax), x.buf(), 1000, true);  // the first 1000 are below 9.5
    CHECK(amax == 9.5f);
    amax = 20.0f;
    ops().abs_max(scalar(amax), x.buf(), 100000, true);
    CHECK(amax == 20.0f);
    ops().abs_max(scalar(amax), x.buf(), 0, false);
    CHECK(amax == 0.0f);
    values[5] = kNaN;
    HostTensor with_nan(values, dtype);
    ops().abs_max(scalar(amax), with_nan.buf(), 100000, false);
    CHECK(std::isnan(amax));
    amax = kNaN;
    ops().abs_max(scalar(amax), x.buf(), 100000, true);  // a NaN history stays NaN
    CHECK(std::isnan(amax));
  }
}

TEST_CASE("fp8_round puts each value on the scaled FP8 grid, exactly, in F32 and BF16", "[fp8]") {
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      INFO(ptrain::kernels::to_string(format) << " " << to_string(dtype));
      Vec values = random_vec(70000, 11, -0.05f, 0.05f);  // gradient-sized values
      values[3] = 0.0f;
      values[4] = -1e-30f;  // far below the grid: to -0
      HostTensor x(values, dtype);
      const Vec stored = x.values();
      float amax = 0.0f;
      ops().abs_max(scalar(amax), x.buf(), 70000, false);
      const float scale = ptrain::kernels::fp8_scale(amax, format);
      HostTensor out(Vec(70000, 0.0f), dtype);
      ops().fp8_round(out.buf(), x.buf(), scalar(amax), 70000, format);
      const Vec got = out.values();
      int wrong = 0;
      for (std::size_t i = 0; i < stored.size(); ++i) {
        const float want =
            ptrain::kernels::fp8_to_f32(ptrain::kernels::f32_to_fp8(stored[i] * scale, format), format) / scale;
        if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want)) ++wrong;
      }
      CHECK(wrong == 0);
      CHECK(std::signbit(got[4]));
      // in place (out aliasing x) gives the same
      ops().fp8_round(x.buf(), x.buf(), scalar(amax), 70000, format);
      CHECK(x.bits() == out.bits());
    }
  }
}

TEST_CASE("a linear layer over fp8_round's operands is the FP8 GEMM with per-tensor scales", "[fp8]") {
  const int M = 16, N = 24, K = 40;
  const Vec a = random_vec(M * K, 3, -4.0f, 4.0f), w = random_vec(N * K, 5, -0.1f, 0.1f);
  float amax_a = 0, amax_w = 0;
  ops().abs_max(scalar(amax_a), buf(a), M * K, false);
  ops().abs_max(scalar(amax_w), buf(w), N * K, false);
  Vec qa(a.size()), qw(w.size()), out(static_cast<std::size_t>(M) * N);
  ops().fp8_round(buf(qa), buf(a), scalar(amax_a), M * K, Fp8Format::E4M3);
  ops().fp8_round(buf(qw), buf(w), scalar(amax_w), N * K, Fp8Format::E4M3);
  ops().linear_forward(buf(out), buf(qa), buf(qw), none(), M, N, K);
  const float sa = ptrain::kernels::fp8_scale(amax_a, Fp8Format::E4M3);
  const float sw = ptrain::kernels::fp8_scale(amax_w, Fp8Format::E4M3);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double codes = 0;  // the FP8 GEMM: products of the FP8 values, then the scales' epilogue
      for (int k = 0; k < K; ++k) {
        const float ca = ptrain::kernels::fp8_to_f32(ptrain::kernels::f32_to_fp8(a[m * K + k] * sa, Fp8Format::E4M3),
                                                     Fp8Format::E4M3);
        const float cw = ptrain::kernels::fp8_to_f32(ptrain::kernels::f32_to_fp8(w[n * K + k] * sw, Fp8Format::E4M3),
                                                     Fp8Format::E4M3);
        codes += static_cast<double>(ca) * cw;
      }
      const double want = codes / (static_cast<double>(sa) * sw);
      CHECK(std::abs(out[m * N + n] - want) <= 1e-5 * (1 + std::abs(want)));
    }
  }
}
