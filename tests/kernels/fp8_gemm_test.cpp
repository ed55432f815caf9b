// The FP8 GEMM path's ops on the CPU (ops.h: fp8_cast, fp8_gemm, fp8_gemm_gelu): the cast's codes,
// transpose, inverse scale and fused amax against kernels/fp8.h element by element; the GEMMs bit for
// bit against the linear ops over fp8_round's operands (what model::BlockLinears computed before the
// FP8 ops existed), for each of a linear layer's three GEMMs, whichever way they are told to sum (the
// CPU's sums are FP32 either way); misuse refused naming the op.
#include <bit>
#include <cstdint>
#include <string>
#include <utility>

#include "kernels/fp8.h"
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;
using ptrain::kernels::Buf;
using ptrain::kernels::DType;
using ptrain::kernels::Fp8Format;
using ptrain::kernels::Fp8Sums;
using ptrain::kernels::fp8_scale;

namespace {

using Codes = std::vector<std::uint8_t>;

Buf codes_buf(Codes& c, DType t) { return Buf{c.data(), t}; }

// x rounded onto the FP8 grid under its own amax's scale (fp8_round), and that amax.
Vec rounded(const Vec& x, Fp8Format format, float& amax) {
  Vec out(x.size());
  ops().abs_max(scalar(amax), buf(x), static_cast<std::int64_t>(x.size()), false);
  ops().fp8_round(buf(out), buf(x), scalar(amax), static_cast<std::int64_t>(x.size()), format);
  return out;
}

// An operand cast to codes (and, when `transposed`, only to the transpose of x [rows, cols]) with its
// inverse scale, under its own amax.
struct Cast {
  Codes codes;
  float inv_scale = 0;
  Cast(const Vec& x, std::int64_t rows, std::int64_t cols, Fp8Format format, bool transposed)
      : codes(x.size()) {
    float amax = 0;
    ops().abs_max(scalar(amax), buf(x), rows * cols, false);
    const Buf out = codes_buf(codes, ptrain::kernels::fp8_dtype(format));
    ops().fp8_cast(transposed ? Buf{} : out, transposed ? out : Buf{}, scalar(inv_scale), Buf{}, buf(x),
                   scalar(amax), rows, cols);
  }
  Buf view(Fp8Format format) { return codes_buf(codes, ptrain::kernels::fp8_dtype(format)); }
  Buf inv() { return scalar(inv_scale); }
};

bool bitwise_equal(const Vec& a, const Vec& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("fp8_cast: the codes, their transpose, the inverse scale and the record in one pass", "[fp8]") {
  const std::int64_t rows = 300, cols = 257;  // past one parallel chunk and one transpose tile
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      INFO(ptrain::kernels::to_string(format) << " " << to_string(dtype));
      Vec values = random_vec(n, 17, -0.3f, 0.2f);
      values[1234] = 0.7f;
      HostTensor x(values, dtype);
      const Vec stored = x.values();
      float amax = 0.5f;  // a scale other than x's own: the cast takes the one it is given
      const float scale = fp8_scale(amax, format);
      const DType t = ptrain::kernels::fp8_dtype(format);
      Codes out(n), out_t(n);
      float inv = 0, record = 0.25f;
      ops().fp8_cast(codes_buf(out, t), codes_buf(out_t, t), scalar(inv), scalar(record), x.buf(), scalar(amax),
                     rows, cols);
      int wrong = 0, wrong_t = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          const std::uint8_t want = ptrain::kernels::f32_to_fp8(stored[static_cast<std::size_t>(r * cols + c)] * scale, format);
          wrong += out[static_cast<std::size_t>(r * cols + c)] != want;
          wrong_t += out_t[static_cast<std::size_t>(c * rows + r)] != want;
        }
      }
      CHECK(wrong == 0);
      CHECK(wrong_t == 0);
      CHECK(inv == 1.0f / scale);
      CHECK(record == stored[1234]);  // the larger of x's amax and what the record held

      // The transpose alone, and a record above x's amax kept; a NaN recorded as NaN.
      Codes only_t(n);
      record = 9.0f;
      ops().fp8_cast(Buf{}, codes_buf(only_t, t), scalar(inv), scalar(record), x.buf(), scalar(amax), rows, cols);
      CHECK(only_t == out_t);
      CHECK(record == 9.0f);
      values[77] = std::numeric_limits<float>::quiet_NaN();
      HostTensor with_nan(values, dtype);
      ops().fp8_cast(codes_buf(out, t), Buf{}, scalar(inv), scalar(record), with_nan.buf(), scalar(amax), rows, cols);
      CHECK(std::isnan(record));
      CHECK(out[77] == 0x7F);
    }
  }
}

TEST_CASE("fp8_gemm computes the linear ops over fp8_round's operands bit for bit, however it is told to sum",
          "[fp8]") {
  const int M = 40, N = 24, K = 56;
  const Vec x = random_vec(M * K, 3, -4.0f, 4.0f), w = random_vec(N * K, 5, -0.1f, 0.1f);
  const Vec dy = random_vec(M * N, 7, -0.02f, 0.02f), bias = random_vec(N, 9, -0.5f, 0.5f);
  float ax = 0, aw = 0, ady = 0;
  const Vec qx = rounded(x, Fp8Format::E4M3, ax), qw = rounded(w, Fp8Format::E4M3, aw);
  const Vec qdy = rounded(dy, Fp8Format::E5M2, ady);
  Cast x8(x, M, K, Fp8Format::E4M3, false), w8(w, N, K, Fp8Format::E4M3, false);
  Cast dy8(dy, M, N, Fp8Format::E5M2, false), dy8_t(dy, M, N, Fp8Format::E5M2, true);
  Cast x8_t(x, M, K, Fp8Format::E4M3, true), w8_t(w, N, K, Fp8Format::E4M3, true);
  const Fp8Format e4 = Fp8Format::E4M3, e5 = Fp8Format::E5M2;

  // the CPU sums in FP32 whatever `sums` says (a GPU's Fast keeps the tensor cores' partial sums)
  const Fp8Sums fast = Fp8Sums::Fast, promoted = Fp8Sums::Promoted;
  for (const auto& [dtype, sums] : {std::pair{DType::F32, fast}, std::pair{DType::BF16, fast},
                                    std::pair{DType::F32, promoted}, std::pair{DType::BF16, promoted}}) {
    INFO(to_string(dtype) << (sums == fast ? ", fast sums" : ", promoted sums"));
    // forward: out = x w^T + bias
    HostTensor out(Vec(M * N), dtype), want(Vec(M * N), dtype), b(bias, dtype);
    ops().fp8_gemm(out.buf(), x8.view(e4), w8.view(e4), x8.inv(), w8.inv(), b.buf(), M, N, K, false, sums);
    HostTensor tqx(qx, dtype), tqw(qw, dtype);  // exact in bf16
    ops().linear_forward(want.buf(), tqx.buf(), tqw.buf(), b.buf(), M, N, K);
    CHECK(bitwise_equal(out.values(), want.values()));

    // forward with GELU: pre and out as linear_gelu_forward's
    HostTensor pre(Vec(M * N), dtype), act(Vec(M * N), dtype), want_pre(Vec(M * N), dtype),
        want_act(Vec(M * N), dtype);
    ops().fp8_gemm_gelu(act.buf(), pre.buf(), x8.view(e4), w8.view(e4), x8.inv(), w8.inv(), b.buf(), M, N, K,
                        sums);
    ops().linear_gelu_forward(want_act.buf(), want_pre.buf(), tqx.buf(), tqw.buf(), b.buf(), M, N, K);
    CHECK(bitwise_equal(pre.values(), want_pre.values()));
    CHECK(bitwise_equal(act.values(), want_act.values()));
  }

  // input gradient: d_in[M,K] = dy[M,N] w[N,K], from w's transposed codes; and added onto d_in
  HostTensor tqdy(qdy, DType::BF16), tqw(qw, DType::BF16), tqx(qx, DType::BF16);
  HostTensor d_in(Vec(M * K), DType::BF16), want_d_in(Vec(M * K), DType::BF16);
  ops().fp8_gemm(d_in.buf(), dy8.view(e5), w8_t.view(e4), dy8.inv(), w8_t.inv(), Buf{}, M, K, N, false, promoted);
  ops().linear_backward(want_d_in.buf(), Buf{}, Buf{}, tqdy.buf(), tqx.buf(), tqw.buf(), M, N, K);
  CHECK(bitwise_equal(d_in.values(), want_d_in.values()));
  ops().fp8_gemm(d_in.buf(), dy8.view(e5), w8_t.view(e4), dy8.inv(), w8_t.inv(), Buf{}, M, K, N, true, promoted);
  ops().linear_input_grad_add(want_d_in.buf(), tqdy.buf(), tqw.buf(), M, N, K);
  CHECK(bitwise_equal(d_in.values(), want_d_in.values()));

  // weight gradient: d_w[N,K] += dy^T x, from dy's and x's transposed codes, into F32 and BF16
  for (const DType dtype : {DType::F32, DType::BF16}) {
    INFO(to_string(dtype));
    const Vec start = random_vec(N * K, 11, -1.0f, 1.0f);
    HostTensor d_w(start, dtype), want_d_w(start, dtype);
    ops().fp8_gemm(d_w.buf(), dy8_t.view(e5), x8_t.view(e4), dy8_t.inv(), x8_t.inv(), Buf{}, N, K, M, true,
                   promoted);
    ops().linear_backward(Buf{}, want_d_w.buf(), Buf{}, tqdy.buf(), tqx.buf(), tqw.buf(), M, N, K);
    CHECK(bitwise_equal(d_w.values(), want_d_w.values()));
  }
}

TEST_CASE("the FP8 dtypes: a byte each, named as the formats", "[fp8][contract]") {
  CHECK(ptrain::kernels::dtype_size(DType::E4M3) == 1);
  CHECK(ptrain::kernels::dtype_size(DType::E5M2) == 1);
  CHECK(std::string(to_string(DType::E4M3)) == "e4m3");
  CHECK(std::string(to_string(DType::E5M2)) == "e5m2");
  CHECK(ptrain::kernels::fp8_format(DType::E5M2) == Fp8Format::E5M2);
  CHECK(ptrain::kernels::fp8_dtype(Fp8Format::E4M3) == DType::E4M3);
}

TEST_CASE("the FP8 ops refuse misuse naming the op", "[fp8][contract][errors]") {
  Vec f(64, 1.0f);
  Codes c1(64), c2(64);
  float amax = 1, inv = 1, record = 0;
  const Buf e4{c1.data(), DType::E4M3}, e5{c2.data(), DType::E5M2}, e5_other{c1.data(), DType::E5M2};
  const auto& o = ops();
  const Fp8Sums promoted = Fp8Sums::Promoted;
  CHECK_THROWS_WITH(o.fp8_cast(Buf{}, Buf{}, scalar(inv), Buf{}, buf(f), scalar(amax), 8, 8),
                    Contains("cpu fp8_cast") && Contains("both null"));
  CHECK_THROWS_WITH(o.fp8_cast(buf(f), Buf{}, scalar(inv), Buf{}, buf(f), scalar(amax), 8, 8),
                    Contains("'out' must be e4m3 or e5m2"));
  CHECK_THROWS_WITH(o.fp8_cast(e4, e5, scalar(inv), Buf{}, buf(f), scalar(amax), 8, 8),
                    Contains("'out_t' must have the dtype of 'out'"));
  CHECK_THROWS_WITH(o.fp8_cast(e4, Buf{}, scalar(inv), scalar(amax), buf(f), scalar(amax), 8, 8),
                    Contains("may not alias 'amax'"));
  CHECK_THROWS_WITH(o.fp8_cast(e4, Buf{}, Buf{}, scalar(record), buf(f), scalar(amax), 8, 8),
                    Contains("'inv_scale' is null"));
  CHECK_THROWS_WITH(o.fp8_gemm(buf(f), e5, e5_other, scalar(inv), scalar(inv), Buf{}, 8, 8, 8, false, promoted),
                    Contains("cpu fp8_gemm") && Contains("both be e5m2"));
  CHECK_THROWS_WITH(o.fp8_gemm(buf(f), e4, e5, scalar(inv), scalar(inv), buf(f), 8, 8, 8, true, promoted),
                    Contains("only without 'accumulate'"));
  CHECK_THROWS_WITH(o.fp8_gemm(buf(f), buf(f), e5, scalar(inv), scalar(inv), Buf{}, 8, 8, 8, false, promoted),
                    Contains("'a' must be e4m3 or e5m2"));
  CHECK_THROWS_WITH(o.fp8_gemm(e4, e4, e5, scalar(inv), scalar(inv), Buf{}, 8, 8, 8, false, promoted),
                    Contains("'out' must be f32 or bf16"));
  CHECK_THROWS_WITH(o.fp8_gemm_gelu(Buf{f.data(), DType::BF16}, buf(f), e4, e4, scalar(inv), scalar(inv), Buf{},
                                    8, 8, 8, Fp8Sums::Fast),
                    Contains("cpu fp8_gemm_gelu") && Contains("'out' must have the dtype of 'pre'"));
}
