// add_layernorm_forward and add_rmsnorm_forward against the pair of ops they fuse, add then the norm on
// the stored sum: bit for bit on the CPU, for F32, BF16 and mixed activation/weight dtypes, odd sizes
// (and the parallel path), x_out separate (poisoned) or aliasing a or b, with and without the optional
// outputs and bias. Bad arguments throw std::invalid_argument naming the op.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;
using ptrain::kernels::Buf;
using ptrain::kernels::DType;
using ptrain::kernels::to_string;

namespace {

void check_same_bits(const HostTensor& got, const HostTensor& want, const std::string& what) {
  const std::vector<std::uint32_t> g = got.bits(), w = want.bits();
  REQUIRE(g.size() == w.size());
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g[i] != w[i] && differ++ == 0) first = i;
  }
  INFO(what << ": " << differ << " of " << g.size() << " elements differ, the first at [" << first << "]");
  CHECK(differ == 0);
}

struct NormTypes {
  DType x, w;  // activations (x_out, out, a, b), weight and bias
};
constexpr NormTypes kTypes[] = {{F32, F32}, {BF16, BF16}, {BF16, F32}, {F32, BF16}};
// Odd sizes; the last is above kParallelMinElements (the OpenMP path).
constexpr std::pair<int, int> kShapes[] = {{1, 1}, {7, 13}, {37, 67}, {67, 1001}};

// One fused call's operands, poisoned outputs included; x_out is its own buffer or a's or b's.
struct FusedArgs {
  HostTensor a, b, x, out;
  XOut x_out;
  HostTensor& sum() { return x_out == XOut::AliasA ? a : x_out == XOut::AliasB ? b : x; }
};

FusedArgs fused_args(const Vec& a, const Vec& b, DType t, XOut x_out) {
  const auto n = a.size();
  return {HostTensor(a, t), HostTensor(b, t), HostTensor(nan_vec(n), t), HostTensor(nan_vec(n), t), x_out};
}

}  // namespace

TEST_CASE("add_layernorm_forward is add then layernorm_forward, bit for bit", "[add_norm][layernorm][bf16]") {
  const float eps = 1e-5f;
  for (const auto& [N, C] : kShapes) {
    for (const NormTypes t : kTypes) {
      for (const XOut x_out : kXOuts) {
        for (const bool optional : {true, false}) {  // mean, rstd and bias given, or all null
          INFO("N=" << N << " C=" << C << " x=" << to_string(t.x) << " w=" << to_string(t.w) << " x_out "
                    << to_string(x_out) << " mean/rstd/bias=" << optional);
          const Vec a = random_vec(N * C, 1, -2.0f, 3.0f), b = random_vec(N * C, 2, -1.5f, 1.0f);
          HostTensor w(random_vec(C, 3, 0.5f, 1.5f), t.w), bias(random_vec(C, 4), t.w);
          auto opt = [optional](HostTensor& x) { return optional ? x.buf() : none(); };

          HostTensor ra(a, t.x), rb(b, t.x), rx(nan_vec(N * C), t.x), rout(nan_vec(N * C), t.x);
          HostTensor rmean(nan_vec(N), F32), rrstd(nan_vec(N), F32);
          ops().add(rx.buf(), ra.buf(), rb.buf(), std::int64_t{N} * C);
          ops().layernorm_forward(rout.buf(), opt(rmean), opt(rrstd), rx.buf(), w.buf(), opt(bias), N, C,
                                  eps);

          FusedArgs f = fused_args(a, b, t.x, x_out);
          HostTensor mean(nan_vec(N), F32), rstd(nan_vec(N), F32);
          ops().add_layernorm_forward(f.sum().buf(), f.out.buf(), opt(mean), opt(rstd), f.a.buf(), f.b.buf(),
                                      w.buf(), opt(bias), N, C, eps);
          check_same_bits(f.sum(), rx, "x_out");
          check_same_bits(f.out, rout, "out");
          check_same_bits(mean, rmean, "mean");
          check_same_bits(rstd, rrstd, "rstd");
        }
      }
    }
  }
}

TEST_CASE("add_rmsnorm_forward is add then rmsnorm_forward, bit for bit", "[add_norm][rmsnorm][bf16]") {
  const float eps = 1e-6f;
  for (const auto& [N, C] : kShapes) {
    for (const NormTypes t : kTypes) {
      for (const XOut x_out : kXOuts) {
        for (const bool with_rstd : {true, false}) {
          INFO("N=" << N << " C=" << C << " x=" << to_string(t.x) << " w=" << to_string(t.w) << " x_out "
                    << to_string(x_out) << " rstd=" << with_rstd);
          const Vec a = random_vec(N * C, 11, -2.0f, 3.0f), b = random_vec(N * C, 12, -1.5f, 1.0f);
          HostTensor w(random_vec(C, 13, 0.5f, 1.5f), t.w);

          HostTensor ra(a, t.x), rb(b, t.x), rx(nan_vec(N * C), t.x), rout(nan_vec(N * C), t.x);
          HostTensor rrstd(nan_vec(N), F32);
          ops().add(rx.buf(), ra.buf(), rb.buf(), std::int64_t{N} * C);
          ops().rmsnorm_forward(rout.buf(), with_rstd ? rrstd.buf() : none(), rx.buf(), w.buf(), N, C, eps);

          FusedArgs f = fused_args(a, b, t.x, x_out);
          HostTensor rstd(nan_vec(N), F32);
          ops().add_rmsnorm_forward(f.sum().buf(), f.out.buf(), with_rstd ? rstd.buf() : none(), f.a.buf(),
                                    f.b.buf(), w.buf(), N, C, eps);
          check_same_bits(f.sum(), rx, "x_out");
          check_same_bits(f.out, rout, "out");
          check_same_bits(rstd, rrstd, "rstd");
        }
      }
    }
  }
}

TEST_CASE("in bf16 the fused norm reads the rounded sum, not the fp32 one", "[add_norm][bf16]") {
  // Why the tests above can tell: the statistics of the unrounded fp32 sums have other bits.
  const int N = 5, C = 67;
  const Vec a = as_dtype(random_vec(N * C, 21, -2.0f, 3.0f), BF16), b = as_dtype(random_vec(N * C, 22), BF16);
  const Vec w = random_vec(C, 23, 0.5f, 1.5f);
  HostTensor ta(a, BF16), tb(b, BF16), x(nan_vec(N * C), BF16), out(nan_vec(N * C), BF16),
      rstd(nan_vec(N), F32);
  ops().add_rmsnorm_forward(x.buf(), out.buf(), rstd.buf(), ta.buf(), tb.buf(), buf(w), N, C, 1e-6f);

  const Vec sum = plus(a, b);  // fp32, unrounded
  Vec o(N * C), rstd_of_sum(N), rstd_of_rounded(N);
  ops().rmsnorm_forward(buf(o), buf(rstd_of_sum), buf(sum), buf(w), N, C, 1e-6f);
  ops().rmsnorm_forward(buf(o), buf(rstd_of_rounded), buf(as_dtype(sum, BF16)), buf(w), N, C, 1e-6f);
  check_same_bits(x, HostTensor(sum, BF16), "x_out");
  check_same_bits(rstd, HostTensor(rstd_of_rounded, F32), "rstd");
  CHECK(rstd.bits() != HostTensor(rstd_of_sum, F32).bits());
}

TEST_CASE("the fused add + norm ops reject bad arguments naming the op", "[add_norm][contract][errors]") {
  Vec s1 = random_vec(64, 1), s2 = random_vec(64, 2), s3 = random_vec(64, 3), s4 = random_vec(64, 4);
  std::vector<std::uint16_t> h1(64), h2(64);
  IVec si(64, 0);
  const Buf f{s1.data(), F32}, g{s2.data(), F32}, k{s3.data(), F32}, m{s4.data(), F32};
  const Buf h{h1.data(), BF16}, j{h2.data(), BF16}, i32 = buf(si);
  const auto& o = ops();
  auto rejects = [](auto&& call, const std::string& op, const std::string& what) {
    REQUIRE_THROWS_AS(call(), std::invalid_argument);
    REQUIRE_THROWS_WITH(call(), Contains("cpu " + op + ": ") && Contains(what));
  };
  const std::string ln = "add_layernorm_forward", rms = "add_rmsnorm_forward";
  rejects([&] { o.add_layernorm_forward(f, g, none(), none(), h, k, m, none(), 2, 2, 1e-5f); }, ln,
          "'a' must have the dtype of 'x_out'");
  rejects([&] { o.add_layernorm_forward(h, j, none(), none(), h, f, m, none(), 2, 2, 1e-5f); }, ln,
          "'b' must have the dtype of 'x_out'");
  rejects([&] { o.add_layernorm_forward(f, g, none(), none(), k, none(), m, none(), 2, 2, 1e-5f); }, ln,
          "'b' is null");
  rejects([&] { o.add_layernorm_forward(h, f, none(), none(), j, h, g, none(), 2, 2, 1e-5f); }, ln,
          "'x_out' must have the dtype of 'out'");
  rejects([&] { o.add_layernorm_forward(f, g, h, none(), k, m, f, none(), 2, 2, 1e-5f); }, ln,
          "'mean' must be f32");
  rejects([&] { o.add_layernorm_forward(h, j, none(), none(), h, j, f, h, 2, 2, 1e-5f); }, ln,
          "'bias' must have the dtype of 'weight'");
  rejects([&] { o.add_layernorm_forward(f, g, none(), none(), k, m, f, none(), 2, 0, 1e-5f); }, ln,
          "C must be positive");
  rejects([&] { o.add_layernorm_forward(f, g, none(), none(), k, m, f, none(), -1, 2, 1e-5f); }, ln,
          "negative size");
  rejects([&] { o.add_rmsnorm_forward(f, g, none(), k, i32, m, 2, 2, 1e-5f); }, rms,
          "'b' must be f32 or bf16");
  rejects([&] { o.add_rmsnorm_forward(h, j, none(), f, h, g, 2, 2, 1e-5f); }, rms,
          "'a' must have the dtype of 'x_out'");
  rejects([&] { o.add_rmsnorm_forward(f, g, h, k, m, f, 2, 2, 1e-5f); }, rms, "'rstd' must be f32");
  rejects([&] { o.add_rmsnorm_forward(f, g, none(), k, m, none(), 2, 2, 1e-5f); }, rms, "'weight' is null");
  rejects([&] { o.add_rmsnorm_forward(none(), g, none(), k, m, f, 2, 2, 1e-5f); }, rms, "'x_out' is null");
}
