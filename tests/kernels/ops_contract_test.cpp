// The interface contract of CpuOps: device, dtype names, and wrong dtypes or missing buffers
// rejected with std::invalid_argument naming the op (never an abort).
#include "kernels/cpu/threads.h"
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;
using ptrain::kernels::AttentionShape;
using ptrain::kernels::Buf;
using ptrain::kernels::Device;
using ptrain::kernels::DType;

TEST_CASE("cpu_ops is the CPU device and dtypes have names", "[contract]") {
  CHECK(ops().device() == Device::Cpu);
  CHECK(&ops() == &ptrain::kernels::cpu_ops());
  CHECK(std::string(ptrain::kernels::to_string(DType::F32)) == "f32");
  CHECK(std::string(ptrain::kernels::to_string(DType::BF16)) == "bf16");
  CHECK(std::string(ptrain::kernels::to_string(DType::I32)) == "i32");
}

TEST_CASE("wrong dtypes and missing buffers throw invalid_argument with the op name", "[contract][errors]") {
  Vec a = random_vec(64, 1), b = random_vec(64, 2), c = random_vec(64, 3), d = random_vec(64, 4);
  IVec tok(8, 0);
  const Buf bf16{a.data(), DType::BF16};
  const Buf f = buf(b);
  const Buf g = buf(c);
  const Buf h = buf(d);
  const Buf ti = buf(tok);
  const Buf tf{tok.data(), DType::F32};
  const auto& o = ops();
  REQUIRE_THROWS_WITH(o.linear_forward(bf16, f, g, none(), 2, 2, 2), Contains("linear_forward"));
  REQUIRE_THROWS_WITH(o.linear_forward(f, g, none(), none(), 2, 2, 2), Contains("'weight' is null"));
  REQUIRE_THROWS_WITH(o.linear_backward(f, g, none(), bf16, f, g, 2, 2, 2), Contains("linear_backward"));
  REQUIRE_THROWS_WITH(o.embedding_forward(f, tf, g, none(), 2, 2, 2), Contains("embedding_forward"));
  REQUIRE_THROWS_WITH(o.embedding_backward(f, none(), g, tf, 2, 2, 2), Contains("embedding_backward"));
  REQUIRE_THROWS_WITH(o.layernorm_forward(f, g, h, bf16, f, none(), 2, 2, 1e-5f),
                      Contains("layernorm_forward"));
  REQUIRE_THROWS_WITH(o.layernorm_backward(f, g, none(), bf16, f, g, h, f, 2, 2),
                      Contains("layernorm_backward"));
  REQUIRE_THROWS_WITH(o.rmsnorm_forward(f, g, bf16, f, 2, 2, 1e-5f), Contains("rmsnorm_forward"));
  REQUIRE_THROWS_WITH(o.rmsnorm_backward(f, g, bf16, f, g, h, 2, 2), Contains("rmsnorm_backward"));
  REQUIRE_THROWS_WITH(o.rope_forward(ti, 1, 2, 1, 2, 1e4f, 0), Contains("rope_forward"));
  REQUIRE_THROWS_WITH(o.rope_backward(ti, 1, 2, 1, 2, 1e4f, 0), Contains("rope_backward"));
  REQUIRE_THROWS_WITH(o.attention_forward(f, g, bf16, f, g, AttentionShape::self_attention(1, 2, 1, 1, 2)),
                      Contains("attention_forward"));
  REQUIRE_THROWS_WITH(
      o.attention_backward(f, g, h, f, g, h, f, g, bf16, AttentionShape::self_attention(1, 2, 1, 1, 2)),
      Contains("attention_backward"));
  REQUIRE_THROWS_WITH(o.gelu_forward(f, bf16, 4), Contains("gelu_forward"));
  REQUIRE_THROWS_WITH(o.gelu_backward(f, g, bf16, 4), Contains("gelu_backward"));
  REQUIRE_THROWS_WITH(o.swiglu_forward(f, g, bf16, 4), Contains("swiglu_forward"));
  REQUIRE_THROWS_WITH(o.swiglu_backward(f, g, h, f, bf16, 4), Contains("swiglu_backward"));
  REQUIRE_THROWS_WITH(o.add(f, g, bf16, 4), Contains("add"));
  REQUIRE_THROWS_WITH(o.accumulate(ti, f, 4), Contains("accumulate"));
  REQUIRE_THROWS_WITH(o.scale(ti, 2.0f, 4), Contains("scale"));
  REQUIRE_THROWS_WITH(o.fill(ti, 2.0f, 4), Contains("fill"));
  REQUIRE_THROWS_WITH(o.cross_entropy_forward_backward(f, g, h, tf, 2, 2, 2, 1.0f),
                      Contains("cross_entropy_forward_backward"));
  REQUIRE_THROWS_WITH(o.adamw_step(f, g, h, bf16, Buf{}, 4, {0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1, 1.0f}),
                      Contains("adamw_step"));
  REQUIRE_THROWS_WITH(o.sum_squares(f, ti, 4), Contains("sum_squares"));
  REQUIRE_THROWS_WITH(o.sum(ti, f, 4), Contains("sum"));
  REQUIRE_THROWS_WITH(o.convert(ti, f, 4), Contains("convert"));
  REQUIRE_THROWS_WITH(o.add(f, g, h, -1), Contains("negative size"));
}

TEST_CASE("results do not depend on the thread count", "[contract]") {
  // Reductions over rows (norm weights, bias, embeddings, attention's grouped d_k/d_v) are ordered
  // independently of the threads: 1 thread and 2 threads give the same bits.
  const int N = 300, C = 96;
  const Vec x = random_vec(N * C, 5), w = random_vec(C, 6), r = random_vec(N * C, 7);
  auto run = [&](int threads) {
    ptrain::kernels::set_cpu_threads(threads);
    Vec out(N * C), mean(N), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    ops().layernorm_forward(buf(out), buf(mean), buf(rstd), buf(x), buf(w), none(), N, C, 1e-5f);
    ops().layernorm_backward(buf(dx), buf(dw), buf(db), buf(r), buf(x), buf(w), buf(mean), buf(rstd), N, C);
    Vec att(N * C), lse(2 * 4 * (N / 2)), dq(N * C), dk(N * C / 2), dv(N * C / 2);
    // B=2, T=150, Hq=4, Hkv=2, D=24 over the same storage.
    ops().attention_forward(buf(att), buf(lse), buf(x), buf(out), buf(out),
                            AttentionShape::self_attention(2, N / 2, 4, 2, 24));
    ops().attention_backward(buf(dq), buf(dk), buf(dv), buf(r), buf(x), buf(out), buf(out), buf(att),
                             buf(lse), AttentionShape::self_attention(2, N / 2, 4, 2, 24));
    float ss = 0;
    ops().sum_squares(scalar(ss), buf(x), N * C);
    return std::tuple{dx, dw, db, att, dq, dk, dv, ss};
  };
  const auto one = run(1);
  const auto two = run(2);
  ptrain::kernels::set_cpu_threads(2);
  CHECK(one == two);
}
