// The CUDA FP8 GEMM path (ops.h: fp8_cast, fp8_gemm, fp8_gemm_gelu) against the CPU's, which equals
// the FP8 emulation bit for bit (tests/kernels/fp8_gemm_test.cpp). Part of cuda_op_tests (its
// main() skips where no GPU is visible).
//  - fp8_cast: bitwise. Codes, transposed codes, inverse scale and record are exact on both sides
//    (the hardware's cvt.rn.satfinite is kernels/fp8.h's rounding; a max is order-free), on the
//    vector path and the per-element one (odd shapes, misaligned x).
//  - fp8_gemm: the same codes and scales on both sides; products exact. The CPU sums in FP32; the
//    GPU does not quite: Hopper's FP8 tensor cores add the products in fixed point aligned to the
//    largest exponent, about 14 bits kept (truncated), into a 13-bit-mantissa accumulator that
//    cuBLASLt promotes into FP32 only "periodically" (Fp8Sums::Promoted), or not at all along K
//    (Fp8Sums::Fast: cublasLt.h, CUBLASLT_MATMUL_DESC_FAST_ACCUM; DeepSeek-V3's report, 3.3.2;
//    DeepGEMM issues 37 and 50; SageAttention2: "FP22"). Stated bound, per element:
//    |gpu - cpu| <= 2 (K+1) 2^-24 S + 2^-e P, S = |c| + P, P = sum_k |a_k b_k|, c what the GEMM adds to
//    (bias, or the accumulated-onto output) (each order's FP32 sum of those K+1 terms lies within
//    (K+1) 2^-24 S of the exact one; 2^-e P is the tensor cores' truncations: a model of them,
//    32-product steps promoted every 4, gives at most 2^-12 P on these shapes, 2^-9.8 P never
//    promoted; e = 9 promoted, 6 fast: the model is ours, and a failure here keeps the GPU session
//    from FP8 training, while a wrong scale errs by a typical element's |result|, about 1.3 P /
//    sqrt(K) on these data (2^-4.4 P at K = 768), and the small integers below check scales and
//    layouts bit for bit). For a BF16 output, each side is then rounded once to bf16 (half an ulp
//    each, an ulp being at most 2^-7 of the value): 2^-6 |cpu| is added, twice that for margin. The
//    largest |gpu - cpu| / P is reported (WARN) to tighten the bound. The GELU epilogue adds
//    cuBLASLt's tanh: bf16's tolerance, as cuda_ops_test's linear + GELU.
//  - fp8_gemm on small integers: every sum exact in either accumulation, so bit for bit (layouts,
//    scales, operand and output types, the bias and beta checked exactly).
//  - fp8_cast's scale from any amax (0, negative, denormal, huge, inf, NaN): the host's, bit for bit.
//  - shapes cuBLASLt's FP8 kernels cannot take are refused naming the op.
//  - the ops' fused amax (ops.h: `amax`, what FP8 current scaling reads): bit for bit abs_max's over
//    the op's own output, the outputs bit for bit those of the call without it, NaN kept, a stale
//    amax overwritten.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/fp8.h"
#include "tests/kernels/cuda/device_buffer.h"
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels;
using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;

namespace {

using Codes = std::vector<std::uint8_t>;

const Ops& gpu() { return cuda_ops(); }
const Ops& cpu() { return cpu_ops(); }

// An operand's codes [rows, cols] and inverse scale, cast on the CPU under its own amax.
struct HostOperand {
  Codes codes;
  float inv_scale = 0;
  DType dtype;
  HostOperand(const Vec& x, std::int64_t rows, std::int64_t cols, Fp8Format format)
      : codes(x.size()), dtype(fp8_dtype(format)) {
    float amax = 0;
    cpu().abs_max(scalar(amax), buf(x), rows * cols, false);
    cpu().fp8_cast(Buf{codes.data(), dtype}, Buf{}, scalar(inv_scale), Buf{}, buf(x), scalar(amax), rows, cols);
  }
  Buf host() { return Buf{codes.data(), dtype}; }
  float value(std::size_t i) const { return fp8_to_f32(codes[i], fp8_format(dtype)) * inv_scale; }
};

// The same operand on the device.
struct DeviceOperand {
  DeviceBuffer codes, inv_scale;
  explicit DeviceOperand(const HostOperand& h) : codes(h.codes.size(), h.dtype), inv_scale(Vec{h.inv_scale}, F32) {
    codes.upload_codes(h.codes);
  }
};

const char* sums_name(Fp8Sums sums) { return sums == Fp8Sums::Fast ? "fast" : "promoted"; }

struct GemmShape {
  int M, N, K;
};

// Each shape under each way of summing.
std::vector<std::pair<GemmShape, Fp8Sums>> shapes_by_sums(std::initializer_list<GemmShape> shapes) {
  std::vector<std::pair<GemmShape, Fp8Sums>> all;
  for (const GemmShape s : shapes)
    for (const Fp8Sums sums : {Fp8Sums::Promoted, Fp8Sums::Fast}) all.emplace_back(s, sums);
  return all;
}

// The bound stated at the top, element by element; `added` [M, N] is what the GEMM added its sum to.
void check_within_bound(const Vec& got, const Vec& ref, const Vec& added, const HostOperand& a, const HostOperand& b,
                        int M, int N, int K, DType out, Fp8Sums sums, const std::string& what) {
  int bad = 0;
  double worst = 0;  // the largest |g - r| / P
  // |values|, decoded once: the sums below are M N K products (1.5e8 at 256 x 768 x 768)
  auto magnitudes = [K](const HostOperand& x, int rows) {
    std::vector<double> v(static_cast<std::size_t>(rows) * K);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::fabs(static_cast<double>(x.value(i)));
    return v;
  };
  const std::vector<double> abs_a = magnitudes(a, M), abs_b = magnitudes(b, N);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const double* a_row = abs_a.data() + static_cast<std::size_t>(m) * K;
      const double* b_row = abs_b.data() + static_cast<std::size_t>(n) * K;
      double p = 0;
      for (int k = 0; k < K; ++k) p += a_row[k] * b_row[k];
      const double s = std::fabs(static_cast<double>(added[static_cast<std::size_t>(m) * N + n])) + p;
      const double r = ref[static_cast<std::size_t>(m) * N + n], g = got[static_cast<std::size_t>(m) * N + n];
      double bound = 2.0 * (K + 1) * std::ldexp(s, -24) + std::ldexp(p, sums == Fp8Sums::Fast ? -6 : -9);
      if (out == BF16) bound += std::ldexp(std::fabs(r), -6);
      if (!(std::fabs(g - r) <= bound)) ++bad;
      if (p > 0) worst = std::max(worst, std::fabs(g - r) / p);
    }
  }
  WARN(what << " M=" << M << " N=" << N << " K=" << K << " " << to_string(out) << " " << sums_name(sums)
            << " sums: largest |gpu - cpu| / P = 2^"
            << (worst > 0 ? std::log2(worst) : -1000.0));
  INFO(what);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cuda fp8_cast equals the CPU's bit for bit: codes, transpose, inverse scale, record", "[cuda][fp8]") {
  struct Shape {
    std::int64_t rows, cols;
    std::size_t offset;  // into x, in elements: 1 misaligns it (the per-element path)
  };
  for (const Shape s : {Shape{512, 768, 0}, Shape{96, 4096, 0}, Shape{37, 45, 0}, Shape{64, 64, 1}}) {
    for (const DType t : {F32, BF16}) {
      for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        INFO(s.rows << "x" << s.cols << " offset " << s.offset << " " << to_string(t) << " " << to_string(format));
        const std::size_t n = static_cast<std::size_t>(s.rows * s.cols);
        Vec values = as_dtype(random_vec(n + s.offset, 21, -0.02f, 0.02f), t);
        values[s.offset + 5] = -1.5f;
        values[s.offset + n / 2] = std::numeric_limits<float>::quiet_NaN();  // code 0x7F, record NaN
        const Vec x(values.begin() + static_cast<std::ptrdiff_t>(s.offset), values.end());
        const DType codes_t = fp8_dtype(format);
        HostTensor hx(x, t);
        Codes out(n), out_t(n);
        float amax = 0.75f, inv = 0, record = 0.125f;
        cpu().fp8_cast(Buf{out.data(), codes_t}, Buf{out_t.data(), codes_t}, scalar(inv), scalar(record), hx.buf(),
                       scalar(amax), s.rows, s.cols);

        const DeviceBuffer gx(values, t), g_out(n, codes_t), g_out_t(n, codes_t);
        const DeviceBuffer scalars(Vec{0.75f, 0.0f, 0.125f}, F32);  // amax, inverse scale, record
        gpu().fp8_cast(g_out.buf(), g_out_t.buf(), scalars.at(1), scalars.at(2), gx.at(s.offset), scalars.at(0),
                       s.rows, s.cols);
        CHECK(g_out.download_codes() == out);
        CHECK(g_out_t.download_codes() == out_t);
        const Vec got = scalars.download();
        CHECK(got[1] == inv);
        CHECK(std::isnan(got[2]));
        CHECK(std::isnan(record));

        // The transpose alone, no record, finite values: the record left alone, the codes the same.
        const DeviceBuffer only_t(n, codes_t), rest(Vec{0.75f, 0.0f}, F32);
        gpu().fp8_cast(Buf{}, only_t.buf(), rest.at(1), Buf{}, gx.at(s.offset), rest.at(0), s.rows, s.cols);
        CHECK(only_t.download_codes() == out_t);
      }
    }
  }
}

TEST_CASE("cuda fp8_gemm and fp8_gemm_gelu equal the CPU's within the stated bound", "[cuda][fp8]") {
  for (const auto& [s, sums] :
       shapes_by_sums({GemmShape{64, 48, 80}, GemmShape{256, 768, 768}, GemmShape{128, 2304, 256}})) {
    const int M = s.M, N = s.N, K = s.K;
    INFO("M=" << M << " N=" << N << " K=" << K << ", " << sums_name(sums) << " sums");
    // The three GEMMs of a linear layer: E4M3 x E4M3 (forward), E5M2 x E4M3 (both gradients).
    for (const Fp8Format a_format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      INFO("a " << to_string(a_format));
      const float spread = a_format == Fp8Format::E5M2 ? 0.01f : 3.0f;
      HostOperand a(random_vec(static_cast<std::size_t>(M) * K, 31, -spread, spread), M, K, a_format);
      HostOperand b(random_vec(static_cast<std::size_t>(N) * K, 33, -0.1f, 0.1f), N, K, Fp8Format::E4M3);
      const DeviceOperand da(a), db(b);
      const Vec bias = random_vec(static_cast<std::size_t>(N), 35, -0.5f, 0.5f);
      for (const DType t : {F32, BF16}) {
        INFO("out " << to_string(t));
        const Vec start = as_dtype(random_vec(static_cast<std::size_t>(M) * N, 37, -1.0f, 1.0f), t);
        HostTensor ref(start, t), hbias(as_dtype(bias, t), t);
        const DeviceBuffer out(start, t), gbias(as_dtype(bias, t), t);
        // with the bias (BF16: the BIAS epilogue; F32: the broadcast then beta 1)
        cpu().fp8_gemm(ref.buf(), a.host(), b.host(), scalar(a.inv_scale), scalar(b.inv_scale), hbias.buf(), M, N, K,
                       false, sums);
        gpu().fp8_gemm(out.buf(), da.codes.buf(), db.codes.buf(), da.inv_scale.buf(), db.inv_scale.buf(), gbias.buf(),
                       M, N, K, false, sums);
        const Vec bias_values = hbias.values();
        Vec bias_rows(static_cast<std::size_t>(M) * N);
        for (std::size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = bias_values[i % static_cast<std::size_t>(N)];
        check_within_bound(out.download(), ref.values(), bias_rows, a, b, M, N, K, t, sums, "fp8_gemm + bias");
        // accumulated onto `start` (a gradient): one rounding on each side, as above
        HostTensor ref_acc(start, t);
        const DeviceBuffer acc(start, t);
        cpu().fp8_gemm(ref_acc.buf(), a.host(), b.host(), scalar(a.inv_scale), scalar(b.inv_scale), Buf{}, M, N, K,
                       true, sums);
        gpu().fp8_gemm(acc.buf(), da.codes.buf(), db.codes.buf(), da.inv_scale.buf(), db.inv_scale.buf(), Buf{}, M, N,
                       K, true, sums);
        check_within_bound(acc.download(), ref_acc.values(), start, a, b, M, N, K, t, sums, "fp8_gemm accumulated");
      }
    }
    // GELU after the forward GEMM, BF16 (cuBLASLt's epilogue where it takes it)
    HostOperand a(random_vec(static_cast<std::size_t>(M) * K, 41, -2.0f, 2.0f), M, K, Fp8Format::E4M3);
    HostOperand b(random_vec(static_cast<std::size_t>(N) * K, 43, -0.1f, 0.1f), N, K, Fp8Format::E4M3);
    const DeviceOperand da(a), db(b);
    const Vec bias = as_dtype(random_vec(static_cast<std::size_t>(N), 45, -0.5f, 0.5f), BF16);
    HostTensor pre(Vec(static_cast<std::size_t>(M) * N), BF16), act(Vec(static_cast<std::size_t>(M) * N), BF16),
        hbias(bias, BF16);
    cpu().fp8_gemm_gelu(act.buf(), pre.buf(), a.host(), b.host(), scalar(a.inv_scale), scalar(b.inv_scale),
                        hbias.buf(), M, N, K, sums);
    const DeviceBuffer g_pre(static_cast<std::size_t>(M) * N, BF16), g_act(static_cast<std::size_t>(M) * N, BF16),
        gbias(bias, BF16);
    gpu().fp8_gemm_gelu(g_act.buf(), g_pre.buf(), da.codes.buf(), db.codes.buf(), da.inv_scale.buf(),
                        db.inv_scale.buf(), gbias.buf(), M, N, K, sums);
    Vec bias_rows(static_cast<std::size_t>(M) * N);
    for (std::size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = bias[i % static_cast<std::size_t>(N)];
    const Vec device_pre_values = g_pre.download();
    check_within_bound(device_pre_values, pre.values(), bias_rows, a, b, M, N, K, BF16, sums, "fp8_gemm_gelu pre");
    // out against the CPU's GELU of the device's own pre (as cuda_ops_test's linear + GELU): the bound
    // above lets pre differ from the CPU's by bf16 steps (the GEMM's sums), and GELU (slope up to
    // 1.13) then moves the rounded out by more than bf16's tolerance allows near |out| = 2, which
    // is not the GELU's error.
    HostTensor device_pre(device_pre_values, BF16), gelu_of_pre(Vec(static_cast<std::size_t>(M) * N), BF16);
    cpu().gelu_forward(gelu_of_pre.buf(), device_pre.buf(), std::int64_t{M} * N);
    check_close(g_act.download(), gelu_of_pre.values(), 1e-2, 1e-2, "fp8_gemm_gelu out, as GELU of pre");
  }
}

TEST_CASE("cuda fp8_cast takes the host's scale from any amax: zero, negative, denormal, huge, inf, NaN",
          "[cuda][fp8]") {
  // fp8_scale on the device from amax[0] (frexp in double, clamped to 2^+-125) against the host's:
  // the inverse scale and every code bit for bit, and a finite record equal to the CPU's.
  constexpr std::int64_t rows = 32, cols = 64;
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  Vec x = random_vec(n, 61, -1.0f, 1.0f);
  x[7] = -1.5f;
  const DeviceBuffer gx(x, F32);
  for (const float amax : {0.75f, 448.0f, std::nextafter(448.0f, 1e9f), 0.0f, -1.0f, 1e-40f,
                           std::numeric_limits<float>::denorm_min(), 1e-30f, std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      INFO("amax " << amax << " " << to_string(format));
      const DType codes_t = fp8_dtype(format);
      Codes out(n);
      float host_amax = amax, inv = 0, record = 0.125f;
      cpu().fp8_cast(Buf{out.data(), codes_t}, Buf{}, scalar(inv), scalar(record), buf(x), scalar(host_amax), rows,
                     cols);
      const DeviceBuffer g_out(n, codes_t), scalars(Vec{amax, 0.0f, 0.125f}, F32);  // amax, inverse scale, record
      gpu().fp8_cast(g_out.buf(), Buf{}, scalars.at(1), scalars.at(2), gx.buf(), scalars.at(0), rows, cols);
      CHECK(g_out.download_codes() == out);
      const Vec got = scalars.download();
      CHECK(got[1] == inv);
      CHECK(got[2] == record);  // 1.5
    }
  }
}

TEST_CASE("cuda fp8_gemm equals the CPU's bit for bit where every sum is exact: small integers", "[cuda][fp8]") {
  // Operands in {-1, 0, 1}, bias in {-4..4}, accumulated-onto outputs in {-8..8}: the scaled codes'
  // products are one power of two (or 0), every partial sum is an integer multiple of it below 2^10 of
  // them (K <= 768), exact in the tensor cores' truncating accumulation, in FP32 and (the sums of
  // random signs staying far below 256) in BF16, whatever order, split or reduction cuBLASLt picks;
  // the scales are powers of two. So both backends give the exact sums: any wrong layout, scale,
  // operand or output type, bias or beta shows here bit for bit.
  auto ints = [](std::size_t count, std::uint32_t seed, int lo, int hi) {
    Vec v;
    for (const std::int32_t i : random_ints(count, seed, lo, hi)) v.push_back(static_cast<float>(i));
    return v;
  };
  for (const auto& [s, sums] : shapes_by_sums({GemmShape{64, 48, 80}, GemmShape{256, 768, 768}})) {
    const int M = s.M, N = s.N, K = s.K;
    const std::size_t mn = static_cast<std::size_t>(M) * N;
    for (const Fp8Format a_format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      INFO("M=" << M << " N=" << N << " K=" << K << " a " << to_string(a_format) << ", " << sums_name(sums)
                << " sums");
      HostOperand a(ints(static_cast<std::size_t>(M) * K, 71, -1, 1), M, K, a_format);
      HostOperand b(ints(static_cast<std::size_t>(N) * K, 73, -1, 1), N, K, Fp8Format::E4M3);
      const DeviceOperand da(a), db(b);
      const Vec bias = ints(static_cast<std::size_t>(N), 75, -4, 4), start = ints(mn, 77, -8, 8);
      for (const DType t : {F32, BF16}) {
        INFO("out " << to_string(t));
        HostTensor ref(Vec(mn, 0.0f), t), ref_acc(start, t), hbias(bias, t);
        cpu().fp8_gemm(ref.buf(), a.host(), b.host(), scalar(a.inv_scale), scalar(b.inv_scale), hbias.buf(), M, N, K,
                       false, sums);
        cpu().fp8_gemm(ref_acc.buf(), a.host(), b.host(), scalar(a.inv_scale), scalar(b.inv_scale), Buf{}, M, N, K,
                       true, sums);
        const DeviceBuffer out(mn, t), acc(start, t), gbias(bias, t);
        gpu().fp8_gemm(out.buf(), da.codes.buf(), db.codes.buf(), da.inv_scale.buf(), db.inv_scale.buf(), gbias.buf(),
                       M, N, K, false, sums);
        gpu().fp8_gemm(acc.buf(), da.codes.buf(), db.codes.buf(), da.inv_scale.buf(), db.inv_scale.buf(), Buf{}, M, N,
                       K, true, sums);
        CHECK(out.download() == ref.values());      // + bias (BF16: the BIAS epilogue; F32: broadcast, beta 1)
        CHECK(acc.download() == ref_acc.values());  // beta 1 onto `start`
        if (t == BF16) {  // the GELU epilogue's aux matrix: the same exact sums plus the bias
          HostTensor pre(Vec(mn), BF16), act(Vec(mn), BF16);
          cpu().fp8_gemm_gelu(act.buf(), pre.buf(), a.host(), b.host(), scalar(a.inv_scale), scalar(b.inv_scale),
                              hbias.buf(), M, N, K, sums);
          const DeviceBuffer g_pre(mn, BF16), g_act(mn, BF16);
          gpu().fp8_gemm_gelu(g_act.buf(), g_pre.buf(), da.codes.buf(), db.codes.buf(), da.inv_scale.buf(),
                              db.inv_scale.buf(), gbias.buf(), M, N, K, sums);
          CHECK(g_pre.download() == pre.values());
        }
      }
    }
  }
}

TEST_CASE("cuda fp8_gemm refuses shapes cuBLASLt's FP8 kernels cannot take", "[cuda][fp8][errors]") {
  const DeviceBuffer a(48 * 32, DType::E4M3), b(40 * 32, DType::E4M3), out(48 * 40, BF16), inv(Vec{1.0f}, F32);
  CHECK_THROWS_WITH(gpu().fp8_gemm(out.buf(), a.buf(), b.buf(), inv.buf(), inv.buf(), Buf{}, 48, 40, 32, false,
                                   Fp8Sums::Promoted),
                    Contains("cuda fp8_gemm") && Contains("multiples of 16"));
  CHECK_THROWS_WITH(gpu().fp8_gemm(out.buf(), a.at(1), b.buf(), inv.buf(), inv.buf(), Buf{}, 32, 32, 16, false,
                                   Fp8Sums::Promoted),
                    Contains("16-byte aligned"));
}

namespace {

// The first index where a and b differ in their bits (NaN payloads and -0 count), or -1.
std::ptrdiff_t first_difference(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]))
      return static_cast<std::ptrdiff_t>(i);
  return -1;
}

// An op taking an amax: its outputs (count and dtype each), those the amax covers (in amax's order),
// and the call, given its outputs and its amax (null: none).
struct AmaxOp {
  std::string name;
  std::vector<std::pair<std::size_t, DType>> outputs;
  std::vector<std::size_t> amax_of;
  std::function<void(const std::vector<Buf>&, Buf)> run;
};

// The op run without an amax and with a stale one (1e30, above any output: overwritten, not
// combined), into NaN-poisoned outputs: every output the same bits both times, and the amax
// abs_max's over its outputs bit for bit (NaN exactly where `nan` put one in an input).
void check_fused_amax(const AmaxOp& op, bool nan) {
  INFO(op.name);
  auto poisoned = [&] {
    std::vector<DeviceBuffer> bufs;
    for (const auto& [count, t] : op.outputs) bufs.emplace_back(nan_vec(count), t);
    return bufs;
  };
  auto views = [](const std::vector<DeviceBuffer>& bufs) {
    std::vector<Buf> v;
    for (const DeviceBuffer& b : bufs) v.push_back(b.buf());
    return v;
  };
  const std::vector<DeviceBuffer> plain = poisoned(), fused = poisoned();
  const std::size_t k = op.amax_of.size();
  const DeviceBuffer amax(Vec(k, 1e30f), F32), ref(k, F32);
  op.run(views(plain), Buf{});
  op.run(views(fused), amax.buf());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    INFO("output " << i);
    CHECK(first_difference(plain[i].download(), fused[i].download()) == -1);
  }
  for (std::size_t j = 0; j < k; ++j) {
    const DeviceBuffer& out = fused[op.amax_of[j]];
    gpu().abs_max(ref.at(j), out.buf(), static_cast<std::int64_t>(out.size()), false);
  }
  const Vec got = amax.download(), want = ref.download();
  CHECK(first_difference(got, want) == -1);
  for (std::size_t j = 0; j < k; ++j) {
    INFO("amax " << j << " = " << got[j]);
    CHECK(std::isnan(got[j]) == nan);
    CHECK((nan || (got[j] > 0 && got[j] < 1e30f)));
  }
}

}  // namespace

TEST_CASE("cuda ops' fused amax is abs_max's over their output bit for bit, the outputs unchanged",
          "[cuda][fp8]") {
  constexpr int N = 37;
  constexpr std::int64_t n = 100003;
  constexpr float eps = 1e-5f;
  using Outs = const std::vector<Buf>&;
  for (const bool nan : {false, true}) {
    for (const DType t : {F32, BF16}) {
      INFO(to_string(t) << (nan ? ", a NaN in the input" : ""));
      auto values = [&](std::size_t count, std::uint32_t seed, float lo, float hi, bool with_nan) {
        Vec v = random_vec(count, seed, lo, hi);
        if (with_nan) v[count / 3] = std::numeric_limits<float>::quiet_NaN();
        return DeviceBuffer(v, t);
      };
      for (const int C : {200, 203}) {  // rows in Packs, and element by element
        const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C);
        const std::size_t nc = static_cast<std::size_t>(N) * C;
        const DeviceBuffer x = values(nc, 1, -3.0f, 3.0f, nan), a = values(nc, 2, -1.0f, 1.0f, false),
                           w = values(C, 3, 0.5f, 1.5f, false), bias = values(C, 4, -1.0f, 1.0f, false);
        check_fused_amax({"layernorm_forward" + shape,
                          {{nc, t}, {N, F32}, {N, F32}},
                          {0},
                          [&](Outs o, Buf amax) {
                            gpu().layernorm_forward(o[0], o[1], o[2], x.buf(), w.buf(), bias.buf(), N, C, eps,
                                                    amax);
                          }},
                         nan);
        check_fused_amax(
            {"rmsnorm_forward" + shape,
             {{nc, t}, {N, F32}},
             {0},
             [&](Outs o, Buf amax) { gpu().rmsnorm_forward(o[0], o[1], x.buf(), w.buf(), N, C, eps, amax); }},
            nan);
        check_fused_amax({"add_layernorm_forward" + shape,
                          {{nc, t}, {nc, t}, {N, F32}, {N, F32}},
                          {1},
                          [&](Outs o, Buf amax) {
                            gpu().add_layernorm_forward(o[0], o[1], o[2], o[3], x.buf(), a.buf(), w.buf(),
                                                        bias.buf(), N, C, eps, amax);
                          }},
                         nan);
        check_fused_amax({"add_rmsnorm_forward" + shape,
                          {{nc, t}, {nc, t}, {N, F32}},
                          {1},
                          [&](Outs o, Buf amax) {
                            gpu().add_rmsnorm_forward(o[0], o[1], o[2], x.buf(), a.buf(), w.buf(), N, C, eps,
                                                      amax);
                          }},
                         nan);
      }
      const std::size_t count = static_cast<std::size_t>(n);
      const DeviceBuffer x = values(count, 5, -6.0f, 6.0f, nan), d = values(count, 6, -1.0f, 1.0f, false),
                         u = values(count, 7, -2.0f, 2.0f, false);
      check_fused_amax({"gelu_backward",
                        {{count, t}},
                        {0},
                        [&](Outs o, Buf amax) { gpu().gelu_backward(o[0], d.buf(), x.buf(), n, amax); }},
                       nan);
      check_fused_amax({"swiglu_forward",
                        {{count, t}},
                        {0},
                        [&](Outs o, Buf amax) { gpu().swiglu_forward(o[0], x.buf(), u.buf(), n, amax); }},
                       nan);
      check_fused_amax(
          {"swiglu_backward",
           {{count, t}, {count, t}},
           {0, 1},
           [&](Outs o, Buf amax) { gpu().swiglu_backward(o[0], o[1], d.buf(), x.buf(), u.buf(), n, amax); }},
          nan);
      // BF16: GELU in cuBLASLt's epilogue, then abs_max; F32: the GEMM then gelu_forward, amax fused.
      constexpr int M = 48, Nn = 80, K = 64;
      const HostOperand ha(random_vec(static_cast<std::size_t>(M) * K, 81, -2.0f, 2.0f), M, K,
                           Fp8Format::E4M3);
      const HostOperand hb(random_vec(static_cast<std::size_t>(Nn) * K, 83, -0.1f, 0.1f), Nn, K,
                           Fp8Format::E4M3);
      const DeviceOperand da(ha), db(hb);
      const DeviceBuffer gbias = values(Nn, 85, -0.5f, 0.5f, nan);  // a NaN: a NaN column of pre and out
      const std::size_t mn = static_cast<std::size_t>(M) * Nn;
      check_fused_amax({"fp8_gemm_gelu",
                        {{mn, t}, {mn, t}},
                        {0},
                        [&](Outs o, Buf amax) {
                          gpu().fp8_gemm_gelu(o[0], o[1], da.codes.buf(), db.codes.buf(), da.inv_scale.buf(),
                                              db.inv_scale.buf(), gbias.buf(), M, Nn, K, Fp8Sums::Fast, amax);
                        }},
                       nan);
    }
  }
}

TEST_CASE("cuda ops' fused amax overwrites what the amax held, and must be f32", "[cuda][fp8]") {
  // The same amax buffer through two calls, the first with outputs 200 times larger: the second's
  // amax is its own output's alone (abs_max's with combine = false), for both of swiglu_backward's too.
  constexpr std::int64_t n = 1001;
  const std::size_t count = static_cast<std::size_t>(n);
  const DeviceBuffer gate(random_vec(count, 91, -2.0f, 2.0f), F32),
      big(random_vec(count, 92, -100.0f, 100.0f), F32), small(random_vec(count, 93, -0.5f, 0.5f), F32);
  const DeviceBuffer out(count, F32), d_up(count, F32), amax(2, F32), ref(2, F32);
  gpu().swiglu_forward(out.buf(), gate.buf(), big.buf(), n, amax.buf());
  const float first = amax.download()[0];
  gpu().swiglu_forward(out.buf(), gate.buf(), small.buf(), n, amax.buf());
  gpu().abs_max(ref.at(0), out.buf(), n, false);
  CHECK(amax.download()[0] == ref.download()[0]);
  CHECK(amax.download()[0] < first / 10);
  gpu().swiglu_backward(out.buf(), d_up.buf(), big.buf(), gate.buf(), big.buf(), n, amax.buf());
  gpu().swiglu_backward(out.buf(), d_up.buf(), small.buf(), gate.buf(), small.buf(), n, amax.buf());
  gpu().abs_max(ref.at(0), out.buf(), n, false);
  gpu().abs_max(ref.at(1), d_up.buf(), n, false);
  CHECK(first_difference(amax.download(), ref.download()) == -1);
  constexpr int N = 7, C = 143;  // 1001 values
  const DeviceBuffer w_big(random_vec(C, 94, 50.0f, 100.0f), F32),
      w_small(random_vec(C, 95, 0.1f, 0.5f), F32);
  gpu().rmsnorm_forward(out.buf(), Buf{}, big.buf(), w_big.buf(), N, C, 1e-5f, amax.buf());
  gpu().rmsnorm_forward(out.buf(), Buf{}, big.buf(), w_small.buf(), N, C, 1e-5f, amax.buf());
  gpu().abs_max(ref.at(0), out.buf(), n, false);
  CHECK(amax.download()[0] == ref.download()[0]);

  const DeviceBuffer bf16_amax(1, BF16);
  CHECK_THROWS_WITH(gpu().gelu_backward(out.buf(), big.buf(), gate.buf(), n, bf16_amax.buf()),
                    Contains("cuda gelu_backward") && Contains("'amax' must be f32"));
  CHECK_THROWS_WITH(gpu().layernorm_forward(out.buf(), Buf{}, Buf{}, big.buf(), w_big.buf(), Buf{}, N, C,
                                            1e-5f, bf16_amax.buf()),
                    Contains("'amax' must be f32"));
}

// Not a check: the numbers the GPU session decides from (docs/fp8.md, "What the GPU run must show"):
// per GEMM of a Llama 3 8B layer at 8192 tokens, the BF16 GEMM against the FP8 GEMM, forward (with
// promoted and with fast sums: what the forward's fast sums save), input gradient (E5M2 x the
// weight's transposed E4M3 codes, promoted) and weight gradient (E5M2 x E4M3 over the transposes,
// K = 8192, added into f32, promoted), and the casts of its
// weight (codes and transpose: once per use when cast on the fly) and of its input, in ms.
// Hidden: run alone by name (scripts/device_session.sh, `cuda_op_tests "[fp8-timing]"`).
TEST_CASE("cuda FP8 GEMM and cast timings at Llama 3 8B's shapes", "[.][fp8-timing]") {
  struct Gemm {
    const char* name;
    int N, K;
  };
  constexpr int M = 8192, kRepeats = 20;
  auto time_ms = [&](auto&& run) {
    run();  // warm-up: the heuristic, the workspace
    const std::uint64_t from = gpu().record_marker();
    for (int i = 0; i < kRepeats; ++i) run();
    const std::uint64_t to = gpu().record_marker();
    const double ms = gpu().marker_seconds(from, to) * 1e3 / kRepeats;
    gpu().release_marker(from);
    gpu().release_marker(to);
    return ms;
  };
  for (const Gemm g : {Gemm{"q/o", 4096, 4096}, Gemm{"k/v", 1024, 4096}, Gemm{"up/gate", 14336, 4096},
                       Gemm{"down", 4096, 14336}}) {
    const std::size_t mk = static_cast<std::size_t>(M) * g.K, nk = static_cast<std::size_t>(g.N) * g.K;
    const DeviceBuffer x(random_vec(mk, 51, -2.0f, 2.0f), BF16), w(random_vec(nk, 53, -0.05f, 0.05f), BF16);
    const DeviceBuffer out(static_cast<std::size_t>(M) * g.N, BF16), x8(mk, DType::E4M3), w8(nk, DType::E4M3),
        w8_t(nk, DType::E4M3), scalars(Vec{2.0f, 0.05f, 0.0f, 0.0f, 0.0f}, F32);
    const double bf16 = time_ms([&] { gpu().linear_forward(out.buf(), x.buf(), w.buf(), Buf{}, M, g.N, g.K); });
    gpu().fp8_cast(x8.buf(), Buf{}, scalars.at(2), Buf{}, x.buf(), scalars.at(0), M, g.K);
    gpu().fp8_cast(w8.buf(), Buf{}, scalars.at(3), Buf{}, w.buf(), scalars.at(1), g.N, g.K);
    auto fp8_forward = [&](Fp8Sums sums) {
      return time_ms([&] {
        gpu().fp8_gemm(out.buf(), x8.buf(), w8.buf(), scalars.at(2), scalars.at(3), Buf{}, M, g.N, g.K, false, sums);
      });
    };
    const double fp8 = fp8_forward(Fp8Sums::Promoted), fp8_fast = fp8_forward(Fp8Sums::Fast);
    const double cast_w = time_ms([&] {
      gpu().fp8_cast(w8.buf(), w8_t.buf(), scalars.at(3), scalars.at(4), w.buf(), scalars.at(1), g.N, g.K);
    });
    const double cast_x = time_ms([&] {
      gpu().fp8_cast(x8.buf(), Buf{}, scalars.at(2), scalars.at(4), x.buf(), scalars.at(0), M, g.K);
    });
    // The weight gradient d_w[N,K] += dy^T x: bf16 through linear_backward, FP8 over the transposes.
    const std::size_t mn = static_cast<std::size_t>(M) * g.N;
    const DeviceBuffer dy(random_vec(mn, 55, -0.01f, 0.01f), BF16), dy8_t(mn, DType::E5M2), x8_t(mk, DType::E4M3),
        d_w(nk, F32);
    const double bf16_wgrad =
        time_ms([&] { gpu().linear_backward(Buf{}, d_w.buf(), Buf{}, dy.buf(), x.buf(), w.buf(), M, g.N, g.K); });
    gpu().fp8_cast(Buf{}, x8_t.buf(), scalars.at(2), Buf{}, x.buf(), scalars.at(0), M, g.K);
    gpu().fp8_cast(Buf{}, dy8_t.buf(), scalars.at(4), Buf{}, dy.buf(), scalars.at(1), M, g.N);
    const double fp8_wgrad = time_ms([&] {
      gpu().fp8_gemm(d_w.buf(), dy8_t.buf(), x8_t.buf(), scalars.at(4), scalars.at(2), Buf{}, g.N, g.K, M, true,
                     Fp8Sums::Promoted);
    });
    // The input gradient d_in[M,K] = dy w: bf16 through linear_backward, FP8 from dy's codes and the
    // weight's transposed codes (w8_t, cast above).
    const DeviceBuffer dy8(mn, DType::E5M2), d_in(mk, BF16);
    const double bf16_dgrad =
        time_ms([&] { gpu().linear_backward(d_in.buf(), Buf{}, Buf{}, dy.buf(), x.buf(), w.buf(), M, g.N, g.K); });
    gpu().fp8_cast(dy8.buf(), Buf{}, scalars.at(4), Buf{}, dy.buf(), scalars.at(1), M, g.N);
    const double fp8_dgrad = time_ms([&] {
      gpu().fp8_gemm(d_in.buf(), dy8.buf(), w8_t.buf(), scalars.at(4), scalars.at(3), Buf{}, M, g.K, g.N, false,
                     Fp8Sums::Promoted);
    });
    const double flops = 2.0 * M * g.N * g.K;
    WARN(g.name << " [" << M << " x " << g.K << "] x [" << g.K << " x " << g.N << "]: bf16 " << bf16 << " ms ("
                << flops / bf16 * 1e-9 << " TFLOP/s), fp8 promoted sums " << fp8 << " ms (" << flops / fp8 * 1e-9
                << " TFLOP/s), fp8 fast sums (the forward's) " << fp8_fast << " ms (" << flops / fp8_fast * 1e-9
                << " TFLOP/s); input gradient bf16 " << bf16_dgrad << " ms, fp8 " << fp8_dgrad << " ms ("
                << flops / fp8_dgrad * 1e-9 << " TFLOP/s); weight gradient bf16 " << bf16_wgrad << " ms, fp8 "
                << fp8_wgrad << " ms (" << flops / fp8_wgrad * 1e-9 << " TFLOP/s); cast weight + transpose " << cast_w
                << " ms, cast input " << cast_x << " ms");
  }
}
