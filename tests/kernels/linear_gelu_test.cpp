// linear_gelu_forward / linear_backward_gelu on the CPU: bit for bit the unfused pair ops.h defines them
// as (linear_forward then gelu_forward; linear_backward then gelu_backward in place), in F32, BF16 and
// mixed precision, odd sizes, the parallel GEMM and GELU paths, with and without bias and each optional
// gradient, outputs poisoned with NaN and parameter gradients pre-filled (accumulated over two calls).
// Also: an MLP through the fused ops passes finite differences, and bad arguments throw naming the op.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;
using ptrain::kernels::Buf;
using ptrain::kernels::DType;
using ptrain::kernels::to_string;

namespace {

struct Shape {
  int M, N, K;
};

void check_same_bits(const HostTensor& got, const HostTensor& want, const std::string& what) {
  const auto g = got.bits(), w = want.bits();
  REQUIRE(g.size() == w.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) bad += g[i] != w[i] ? 1 : 0;
  if (bad > 0) {
    FAIL_CHECK(what << ": " << bad << " of " << g.size() << " elements differ from the unfused pair");
  } else {
    SUCCEED(what);
  }
}

// A tensor of `count` values (at least one: the ops require their inputs even when empty).
Vec values(int count, std::uint32_t seed) {
  return random_vec(static_cast<std::size_t>(std::max(count, 1)), seed);
}

}  // namespace

TEST_CASE("linear_gelu_forward is bit for bit linear_forward then gelu_forward", "[linear][linear_gelu]") {
  struct Types {
    DType in, out;
  };
  // Odd sizes; one large enough for parallel GEMM blocks and GELU chunks; an empty sum (pre = bias).
  for (const Shape s : {Shape{7, 13, 5}, Shape{37, 29, 45}, Shape{130, 267, 257}, Shape{5, 7, 0}}) {
    for (const Types t : {Types{F32, F32}, Types{BF16, F32}, Types{BF16, BF16}}) {
      for (const bool with_bias : {true, false}) {
        INFO("M=" << s.M << " N=" << s.N << " K=" << s.K << " in=" << to_string(t.in)
                  << " out=" << to_string(t.out) << " bias=" << with_bias);
        HostTensor in(values(s.M * s.K, 1), t.in), w(values(s.N * s.K, 2), t.in), b(values(s.N, 3), t.out);
        const Buf bias = with_bias ? b.buf() : none();
        const int n = s.M * s.N;
        HostTensor out(nan_vec(n), t.out), pre(nan_vec(n), t.out);
        ops().linear_gelu_forward(out.buf(), pre.buf(), in.buf(), w.buf(), bias, s.M, s.N, s.K);

        HostTensor ref_out(nan_vec(n), t.out), ref_pre(nan_vec(n), t.out);
        ops().linear_forward(ref_pre.buf(), in.buf(), w.buf(), bias, s.M, s.N, s.K);
        ops().gelu_forward(ref_out.buf(), ref_pre.buf(), n);
        check_same_bits(pre, ref_pre, "pre");
        check_same_bits(out, ref_out, "out");
      }
    }
  }
}

TEST_CASE("linear_backward_gelu is bit for bit linear_backward then gelu_backward in place",
          "[linear][linear_gelu][grad]") {
  struct Types {
    DType compute, d_pre, d_weight, d_bias;  // compute: d_out, in, weight; pre has d_pre's type
  };
  struct Grads {
    bool d_weight, d_bias;
  };
  // Odd sizes; parallel GEMM blocks and GELU chunks (M*K); N == 0 (d_pre = 0 * gelu'(pre)).
  for (const Shape s : {Shape{7, 13, 5}, Shape{37, 29, 45}, Shape{130, 67, 257}, Shape{5, 0, 9}}) {
    for (const Types t : {Types{F32, F32, F32, F32}, Types{BF16, BF16, F32, F32},
                          Types{BF16, BF16, BF16, BF16}, Types{BF16, F32, BF16, F32}}) {
      for (const Grads grads :
           {Grads{true, true}, Grads{true, false}, Grads{false, true}, Grads{false, false}}) {
        INFO("M=" << s.M << " N=" << s.N << " K=" << s.K << " compute=" << to_string(t.compute)
                  << " d_pre=" << to_string(t.d_pre) << " d_weight=" << to_string(t.d_weight)
                  << " d_bias=" << to_string(t.d_bias) << " with d_weight=" << grads.d_weight
                  << " with d_bias=" << grads.d_bias);
        HostTensor d_out(values(s.M * s.N, 11), t.compute), in(values(s.M * s.K, 12), t.compute);
        HostTensor w(values(s.N * s.K, 13), t.compute), pre(random_vec(s.M * s.K, 14, -4.0f, 4.0f), t.d_pre);
        const Vec dw0 = values(s.N * s.K, 15), db0 = values(s.N, 16);
        HostTensor d_pre(nan_vec(s.M * s.K), t.d_pre), dw(dw0, t.d_weight), db(db0, t.d_bias);
        HostTensor ref_d_pre(nan_vec(s.M * s.K), t.d_pre), ref_dw(dw0, t.d_weight), ref_db(db0, t.d_bias);
        for (int call = 0; call < 2; ++call) {  // the second accumulates onto the first
          INFO("call " << call);
          ops().linear_backward_gelu(d_pre.buf(), grads.d_weight ? dw.buf() : none(),
                                     grads.d_bias ? db.buf() : none(), d_out.buf(), in.buf(), w.buf(),
                                     pre.buf(), s.M, s.N, s.K);
          ops().linear_backward(ref_d_pre.buf(), grads.d_weight ? ref_dw.buf() : none(),
                                grads.d_bias ? ref_db.buf() : none(), d_out.buf(), in.buf(), w.buf(), s.M,
                                s.N, s.K);
          ops().gelu_backward(ref_d_pre.buf(), ref_d_pre.buf(), pre.buf(), std::int64_t{s.M} * s.K);
          check_same_bits(d_pre, ref_d_pre, "d_pre");
          check_same_bits(dw, ref_dw, "d_weight");
          check_same_bits(db, ref_db, "d_bias");
        }
      }
    }
  }
}

// x -> act = gelu(x W_up^T + b_up) -> y = act W_down^T + b_down, loss = sum(y * r): the fused forward of
// the up projection, the fused backward of the down projection, linear_backward for the up projection.
TEST_CASE("an MLP through the fused ops passes finite differences", "[linear][linear_gelu][grad]") {
  const int M = 4, C = 5, H = 7;
  Vec x = random_vec(M * C, 21), w_up = random_vec(H * C, 22), b_up = random_vec(H, 23);
  Vec w_down = random_vec(C * H, 24), b_down = random_vec(C, 25);
  const Vec r = random_vec(M * C, 26);
  Vec act(M * H), pre(M * H);
  auto loss = [&] {
    Vec y(M * C);
    ops().linear_gelu_forward(buf(act), buf(pre), buf(x), buf(w_up), buf(b_up), M, H, C);
    ops().linear_forward(buf(y), buf(act), buf(w_down), buf(b_down), M, C, H);
    return weighted_sum(y, r);
  };
  loss();  // act and pre at the unperturbed point
  Vec d_pre = nan_vec(M * H), dx = nan_vec(M * C);
  Vec dw_down(C * H, 0.0f), db_down(C, 0.0f), dw_up(H * C, 0.0f), db_up(H, 0.0f);
  ops().linear_backward_gelu(buf(d_pre), buf(dw_down), buf(db_down), buf(r), buf(act), buf(w_down), buf(pre),
                             M, C, H);
  ops().linear_backward(buf(dx), buf(dw_up), buf(db_up), buf(d_pre), buf(x), buf(w_up), M, H, C);
  check_grad("d_x", x, dx, loss);
  check_grad("d_w_up", w_up, dw_up, loss);
  check_grad("d_b_up", b_up, db_up, loss);
  check_grad("d_w_down", w_down, dw_down, loss);
  check_grad("d_b_down", b_down, db_down, loss);
}

TEST_CASE("linear + gelu ops reject bad arguments naming the fused op", "[linear_gelu][errors]") {
  Vec a = random_vec(64, 1), b = random_vec(64, 2), c = random_vec(64, 3), d = random_vec(64, 4);
  const Buf f = buf(a), g = buf(b), h = buf(c), bf16{d.data(), BF16};
  const auto& o = ops();
  REQUIRE_THROWS_WITH(o.linear_gelu_forward(f, none(), g, h, none(), 2, 2, 2),
                      Contains("cpu linear_gelu_forward") && Contains("'pre' is null"));
  REQUIRE_THROWS_WITH(o.linear_gelu_forward(none(), f, g, h, none(), 2, 2, 2), Contains("'out' is null"));
  REQUIRE_THROWS_WITH(o.linear_gelu_forward(bf16, f, g, h, none(), 2, 2, 2),
                      Contains("'out' must have the dtype of 'pre'"));
  REQUIRE_THROWS_WITH(o.linear_gelu_forward(f, bf16, g, h, none(), 2, 2, 2),
                      Contains("'pre' must be f32 when 'in' is f32"));
  REQUIRE_THROWS_WITH(o.linear_gelu_forward(f, g, h, f, bf16, 2, 2, 2),
                      Contains("'bias' must have the dtype of 'pre'"));
  REQUIRE_THROWS_WITH(o.linear_gelu_forward(f, g, h, f, none(), 2, -2, 2),
                      Contains("linear_gelu_forward") && Contains("negative size"));

  REQUIRE_THROWS_WITH(o.linear_backward_gelu(none(), none(), none(), f, g, h, f, 2, 2, 2),
                      Contains("cpu linear_backward_gelu") && Contains("'d_pre' is null"));
  REQUIRE_THROWS_WITH(o.linear_backward_gelu(f, none(), none(), g, h, f, none(), 2, 2, 2),
                      Contains("'pre' is null"));
  REQUIRE_THROWS_WITH(o.linear_backward_gelu(f, none(), none(), g, h, f, bf16, 2, 2, 2),
                      Contains("'pre' must have the dtype of 'd_pre'"));
  REQUIRE_THROWS_WITH(o.linear_backward_gelu(bf16, none(), none(), g, h, f, bf16, 2, 2, 2),
                      Contains("'d_pre' must be f32 when 'd_out' is f32"));
  REQUIRE_THROWS_WITH(o.linear_backward_gelu(f, g, none(), h, none(), f, g, 2, 2, 2),
                      Contains("linear_backward_gelu") && Contains("'in' is null"));
  REQUIRE_THROWS_AS(o.linear_backward_gelu(f, none(), none(), g, h, f, g, 2, 2, -1), std::invalid_argument);
}
