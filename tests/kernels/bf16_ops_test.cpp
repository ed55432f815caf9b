// BF16 on the CPU ops: every op, in the dtype combinations the CUDA ops accept (mixed precision:
// BF16 activations and weights with F32 gradients; all BF16), gives bit for bit what the F32 op
// computes on the bf16-rounded inputs with each output rounded once to bf16 (for accumulating
// outputs: from their rounded starting values). That is the CUDA kernels' arithmetic, so the CPU is
// their reference (tests/kernels/cuda). Odd sizes, random non-zero inputs, outputs poisoned with NaN
// or pre-filled to tell accumulate from overwrite, the parallel paths, and aliasing as ops.h allows.
// Also: the dtype combinations CUDA rejects throw std::invalid_argument naming op and argument.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;
using ptrain::kernels::AttentionShape;
using ptrain::kernels::bf16_to_f32;
using ptrain::kernels::Buf;
using ptrain::kernels::DType;
using ptrain::kernels::f32_to_bf16;
using ptrain::kernels::to_string;

namespace {

// One float argument of an op under test, held twice from the same values (rounded to `dtype`):
// stored as `dtype` for the run under test (buf()), and as F32 for the reference run (ref()), the F32
// op on the rounded values.
class Arg {
 public:
  Arg(const Vec& values, DType dtype) : dtype_(dtype), ref_(as_dtype(values, dtype)) {
    if (dtype == BF16) {
      for (float x : ref_) bits_.push_back(f32_to_bf16(x));
    } else {
      f32_ = ref_;
    }
  }

  Buf buf() { return dtype_ == BF16 ? Buf{bits_.data(), BF16} : Buf{f32_.data(), F32}; }
  Buf ref() { return Buf{ref_.data(), F32}; }

  // The run under test holds the reference's values rounded once to its dtype, bit for bit. Both
  // then go on from the stored values (a later call accumulates onto what the buffer holds).
  void check(const std::string& what) {
    ref_ = as_dtype(ref_, dtype_);
    Vec got = f32_;
    if (dtype_ == BF16) {
      for (std::uint16_t b : bits_) got.push_back(bf16_to_f32(b));
    }
    check_close(got, ref_, 0.0, 0.0, what + " (" + to_string(dtype_) + ")");
  }

 private:
  DType dtype_;
  Vec ref_;
  Vec f32_;
  std::vector<std::uint16_t> bits_;
};

}  // namespace

// ------------------------------------------------------------------ linear

TEST_CASE("bf16 linear_forward is the f32 op on rounded inputs, rounded once", "[bf16][linear]") {
  struct Case {
    int M, N, K;
    DType in, out;
    bool bias;
  };
  for (const Case c : {Case{37, 29, 45, BF16, F32, true}, Case{37, 29, 45, BF16, BF16, true},
                       Case{37, 29, 45, BF16, BF16, false}, Case{130, 67, 257, BF16, BF16, true},
                       Case{5, 7, 0, BF16, BF16, true}}) {
    INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " in=" << to_string(c.in)
              << " out=" << to_string(c.out) << " bias=" << c.bias);
    // in and weight are required even when empty (K == 0): one element then.
    Arg in(random_vec(std::max(c.M * c.K, 1), 1), c.in), w(random_vec(std::max(c.N * c.K, 1), 2), c.in);
    Arg out(nan_vec(c.M * c.N), c.out), b(random_vec(c.N, 3), c.out);
    ops().linear_forward(out.ref(), in.ref(), w.ref(), c.bias ? b.ref() : none(), c.M, c.N, c.K);
    ops().linear_forward(out.buf(), in.buf(), w.buf(), c.bias ? b.buf() : none(), c.M, c.N, c.K);
    out.check("out");
  }
}

TEST_CASE("bf16 linear_backward: d_in overwritten, d_weight and d_bias accumulated", "[bf16][linear][grad]") {
  struct Case {
    DType compute, d_in, d_weight, d_bias;
  };
  const int M = 37, N = 29, K = 45;
  for (const Case c : {Case{BF16, F32, F32, F32}, Case{BF16, BF16, BF16, BF16}, Case{BF16, BF16, F32, BF16},
                       Case{BF16, F32, BF16, F32}}) {
    INFO("compute=" << to_string(c.compute) << " d_in=" << to_string(c.d_in)
                    << " d_weight=" << to_string(c.d_weight) << " d_bias=" << to_string(c.d_bias));
    Arg in(random_vec(M * K, 11), c.compute), w(random_vec(N * K, 12), c.compute);
    Arg dy(random_vec(M * N, 13), c.compute), din(nan_vec(M * K), c.d_in);
    Arg dw(random_vec(N * K, 14), c.d_weight), db(random_vec(N, 15), c.d_bias);
    for (int call = 0; call < 2; ++call) {  // the second accumulates onto the rounded first
      INFO("call " << call);
      ops().linear_backward(din.ref(), dw.ref(), db.ref(), dy.ref(), in.ref(), w.ref(), M, N, K);
      ops().linear_backward(din.buf(), dw.buf(), db.buf(), dy.buf(), in.buf(), w.buf(), M, N, K);
      din.check("d_in");
      dw.check("d_weight");
      db.check("d_bias");
    }
    // Optional outputs: d_bias alone.
    ops().linear_backward(none(), none(), db.ref(), dy.ref(), none(), none(), M, N, K);
    ops().linear_backward(none(), none(), db.buf(), dy.buf(), none(), none(), M, N, K);
    db.check("d_bias alone");
  }
}

// ------------------------------------------------------------------ embedding

namespace {

struct EmbeddingShape {
  int B, T, C, V;
};
// Few ids (long runs of repeats, the parallel path) and many (rows no token picks stay as they are).
constexpr EmbeddingShape kEmbeddingShapes[] = {{3, 7, 67, 50}, {8, 64, 67, 9}};

}  // namespace

TEST_CASE("bf16 embedding_forward gathers the rounded rows", "[bf16][embedding]") {
  for (const EmbeddingShape s : kEmbeddingShapes) {
    const int N = s.B * s.T;
    IVec tokens = random_ints(N, 1, 0, s.V - 1);
    for (const bool with_pos : {true, false}) {
      INFO("B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V << " positions=" << with_pos);
      Arg out(nan_vec(N * s.C), BF16), table(random_vec(s.V * s.C, 2), BF16),
          pos(random_vec(s.T * s.C, 3), BF16);
      ops().embedding_forward(out.ref(), buf(tokens), table.ref(), with_pos ? pos.ref() : none(), N, s.T,
                              s.C);
      ops().embedding_forward(out.buf(), buf(tokens), table.buf(), with_pos ? pos.buf() : none(), N, s.T,
                              s.C);
      out.check("out");
    }
  }
}

TEST_CASE("bf16 embedding_backward sums in token order and rounds once", "[bf16][embedding][grad]") {
  for (const EmbeddingShape s : kEmbeddingShapes) {
    const int N = s.B * s.T;
    IVec tokens = random_ints(N, 4, 0, s.V - 1);
    for (const DType dy_type : {F32, BF16}) {
      for (const DType grad_type : {F32, BF16}) {
        INFO("B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V << " d_out=" << to_string(dy_type)
                  << " grads=" << to_string(grad_type));
        Arg dy(random_vec(N * s.C, 5), dy_type);
        Arg dt(random_vec(s.V * s.C, 6), grad_type), dp(random_vec(s.T * s.C, 7), grad_type);
        for (int call = 0; call < 2; ++call) {
          INFO("call " << call);
          ops().embedding_backward(dt.ref(), dp.ref(), dy.ref(), buf(tokens), N, s.T, s.C);
          ops().embedding_backward(dt.buf(), dp.buf(), dy.buf(), buf(tokens), N, s.T, s.C);
          dt.check("d_table");
          dp.check("d_positions");
        }
        ops().embedding_backward(dt.ref(), none(), dy.ref(), buf(tokens), N, s.T, s.C);
        ops().embedding_backward(dt.buf(), none(), dy.buf(), buf(tokens), N, s.T, s.C);
        dt.check("d_table alone");
        ops().embedding_backward(none(), dp.ref(), dy.ref(), buf(tokens), N, s.T, s.C);
        ops().embedding_backward(none(), dp.buf(), dy.buf(), buf(tokens), N, s.T, s.C);
        dp.check("d_positions alone");
      }
    }
  }
}

TEST_CASE("bf16 embedding ops still reject negative token ids", "[bf16][embedding][errors]") {
  const int C = 3;
  IVec tokens = {0, -2, 1};
  Arg table(random_vec(2 * C, 1), BF16), out(nan_vec(3 * C), BF16);
  REQUIRE_THROWS_WITH(ops().embedding_forward(out.buf(), buf(tokens), table.buf(), none(), 3, 3, C),
                      Contains("negative token id -2"));
  REQUIRE_THROWS_WITH(ops().embedding_backward(table.buf(), none(), out.buf(), buf(tokens), 3, 3, C),
                      Contains("negative token id -2"));
}

// ------------------------------------------------------------------ norms

namespace {

struct NormTypes {
  DType x, w, g;  // activations, weight (and bias), parameter gradients
};
constexpr NormTypes kNormTypes[] = {
    {BF16, BF16, F32}, {BF16, BF16, BF16}, {BF16, F32, BF16}, {F32, BF16, F32}, {F32, F32, BF16}};
constexpr std::pair<int, int> kNormShapes[] = {{37, 67}, {37, 1000}};

}  // namespace

TEST_CASE("bf16 layernorm forward and backward", "[bf16][layernorm][grad]") {
  for (const auto& [N, C] : kNormShapes) {
    for (const NormTypes t : kNormTypes) {
      INFO("N=" << N << " C=" << C << " x=" << to_string(t.x) << " w=" << to_string(t.w)
                << " grads=" << to_string(t.g));
      Arg x(random_vec(N * C, 1, -2.0f, 3.0f), t.x), w(random_vec(C, 2, 0.5f, 1.5f), t.w);
      Arg b(random_vec(C, 3), t.w), out(nan_vec(N * C), t.x), mean(nan_vec(N), F32), rstd(nan_vec(N), F32);
      ops().layernorm_forward(out.ref(), mean.ref(), rstd.ref(), x.ref(), w.ref(), b.ref(), N, C, 1e-5f);
      ops().layernorm_forward(out.buf(), mean.buf(), rstd.buf(), x.buf(), w.buf(), b.buf(), N, C, 1e-5f);
      out.check("out");
      mean.check("mean");
      rstd.check("rstd");
      ops().layernorm_forward(out.ref(), none(), none(), x.ref(), w.ref(), none(), N, C, 1e-5f);
      ops().layernorm_forward(out.buf(), none(), none(), x.buf(), w.buf(), none(), N, C, 1e-5f);
      out.check("out without bias or stats");

      Arg dy(random_vec(N * C, 4), t.x), din(random_vec(N * C, 5), t.x);
      Arg dw(random_vec(C, 6), t.g), db(random_vec(C, 7), t.g);
      ops().layernorm_backward(din.ref(), dw.ref(), db.ref(), dy.ref(), x.ref(), w.ref(), mean.ref(),
                               rstd.ref(), N, C);
      ops().layernorm_backward(din.buf(), dw.buf(), db.buf(), dy.buf(), x.buf(), w.buf(), mean.buf(),
                               rstd.buf(), N, C);
      din.check("d_in (accumulated)");
      dw.check("d_weight (accumulated)");
      db.check("d_bias (accumulated)");
      ops().layernorm_backward(none(), dw.ref(), none(), dy.ref(), x.ref(), w.ref(), mean.ref(), rstd.ref(),
                               N, C);
      ops().layernorm_backward(none(), dw.buf(), none(), dy.buf(), x.buf(), w.buf(), mean.buf(), rstd.buf(),
                               N, C);
      dw.check("d_weight alone");
    }
  }
}

TEST_CASE("bf16 rmsnorm forward and backward", "[bf16][rmsnorm][grad]") {
  for (const auto& [N, C] : kNormShapes) {
    for (const NormTypes t : kNormTypes) {
      INFO("N=" << N << " C=" << C << " x=" << to_string(t.x) << " w=" << to_string(t.w)
                << " grads=" << to_string(t.g));
      Arg x(random_vec(N * C, 21, -2.0f, 3.0f), t.x), w(random_vec(C, 22, 0.5f, 1.5f), t.w);
      Arg out(nan_vec(N * C), t.x), rstd(nan_vec(N), F32);
      ops().rmsnorm_forward(out.ref(), rstd.ref(), x.ref(), w.ref(), N, C, 1e-6f);
      ops().rmsnorm_forward(out.buf(), rstd.buf(), x.buf(), w.buf(), N, C, 1e-6f);
      out.check("out");
      rstd.check("rstd");

      Arg dy(random_vec(N * C, 24), t.x), din(random_vec(N * C, 25), t.x), dw(random_vec(C, 26), t.g);
      ops().rmsnorm_backward(din.ref(), dw.ref(), dy.ref(), x.ref(), w.ref(), rstd.ref(), N, C);
      ops().rmsnorm_backward(din.buf(), dw.buf(), dy.buf(), x.buf(), w.buf(), rstd.buf(), N, C);
      din.check("d_in (accumulated)");
      dw.check("d_weight (accumulated)");
      ops().rmsnorm_backward(din.ref(), none(), dy.ref(), x.ref(), w.ref(), rstd.ref(), N, C);
      ops().rmsnorm_backward(din.buf(), none(), dy.buf(), x.buf(), w.buf(), rstd.buf(), N, C);
      din.check("d_in alone");
    }
  }
}

// ------------------------------------------------------------------ rope and attention

TEST_CASE("bf16 rope forward and backward, in place", "[bf16][rope]") {
  const int B = 2, T = 5, H = 3, D = 14;
  Arg x(random_vec(B * T * H * D, 1), BF16);
  ops().rope_forward(x.ref(), B, T, H, D, 10000.0f, 3);
  ops().rope_forward(x.buf(), B, T, H, D, 10000.0f, 3);
  x.check("rope_forward");
  ops().rope_backward(x.ref(), B, T, H, D, 10000.0f, 3);
  ops().rope_backward(x.buf(), B, T, H, D, 10000.0f, 3);
  x.check("rope_backward");
}

TEST_CASE("bf16 attention forward and backward", "[bf16][attention][grad]") {
  struct Case {
    int B, T, Hq, Hkv, D;
  };
  for (const Case c : {Case{2, 37, 4, 2, 24}, Case{1, 70, 3, 3, 16}}) {
    INFO("B=" << c.B << " T=" << c.T << " Hq=" << c.Hq << " Hkv=" << c.Hkv << " D=" << c.D);
    const int nq = c.B * c.T * c.Hq * c.D, nkv = c.B * c.T * c.Hkv * c.D;
    Arg q(random_vec(nq, 1), BF16), k(random_vec(nkv, 2), BF16), v(random_vec(nkv, 3), BF16);
    Arg out(nan_vec(nq), BF16), lse(nan_vec(c.B * c.Hq * c.T), F32);
    ops().attention_forward(out.ref(), lse.ref(), q.ref(), k.ref(), v.ref(),
                            AttentionShape::self_attention(c.B, c.T, c.Hq, c.Hkv, c.D));
    ops().attention_forward(out.buf(), lse.buf(), q.buf(), k.buf(), v.buf(),
                            AttentionShape::self_attention(c.B, c.T, c.Hq, c.Hkv, c.D));
    out.check("out");
    lse.check("lse");

    Arg dy(random_vec(nq, 4), BF16), dq(nan_vec(nq), BF16), dk(nan_vec(nkv), BF16), dv(nan_vec(nkv), BF16);
    ops().attention_backward(dq.ref(), dk.ref(), dv.ref(), dy.ref(), q.ref(), k.ref(), v.ref(), out.ref(),
                             lse.ref(), AttentionShape::self_attention(c.B, c.T, c.Hq, c.Hkv, c.D));
    ops().attention_backward(dq.buf(), dk.buf(), dv.buf(), dy.buf(), q.buf(), k.buf(), v.buf(), out.buf(),
                             lse.buf(), AttentionShape::self_attention(c.B, c.T, c.Hq, c.Hkv, c.D));
    dq.check("d_q");
    dk.check("d_k");
    dv.check("d_v");
  }
}

// ------------------------------------------------------------------ activations and elementwise

TEST_CASE("bf16 gelu and swiglu, with the aliasing ops.h allows", "[bf16][activations]") {
  for (const int n : {13, 100003}) {
    INFO("n=" << n);
    Arg x(random_vec(n, 1, -6.0f, 6.0f), BF16), up(random_vec(n, 2, -2.0f, 2.0f), BF16);
    Arg out(nan_vec(n), BF16);
    ops().gelu_forward(out.ref(), x.ref(), n);
    ops().gelu_forward(out.buf(), x.buf(), n);
    out.check("gelu_forward");
    Arg dy(random_vec(n, 3), BF16), dx(nan_vec(n), BF16);
    ops().gelu_backward(dx.ref(), dy.ref(), x.ref(), n);
    ops().gelu_backward(dx.buf(), dy.buf(), x.buf(), n);
    dx.check("gelu_backward");
    ops().swiglu_forward(out.ref(), x.ref(), up.ref(), n);
    ops().swiglu_forward(out.buf(), x.buf(), up.buf(), n);
    out.check("swiglu_forward");
    Arg dg(nan_vec(n), BF16), du(nan_vec(n), BF16);
    ops().swiglu_backward(dg.ref(), du.ref(), dy.ref(), x.ref(), up.ref(), n);
    ops().swiglu_backward(dg.buf(), du.buf(), dy.buf(), x.buf(), up.buf(), n);
    dg.check("swiglu_backward d_gate");
    du.check("swiglu_backward d_up");

    // In place: out == in, d_in == d_out, d_gate == d_out.
    Arg y(random_vec(n, 4, -6.0f, 6.0f), BF16);
    ops().gelu_forward(y.ref(), y.ref(), n);
    ops().gelu_forward(y.buf(), y.buf(), n);
    y.check("gelu_forward in place");
    ops().gelu_backward(y.ref(), y.ref(), x.ref(), n);
    ops().gelu_backward(y.buf(), y.buf(), x.buf(), n);
    y.check("gelu_backward, d_in aliasing d_out");
    ops().swiglu_backward(y.ref(), du.ref(), y.ref(), x.ref(), up.ref(), n);
    ops().swiglu_backward(y.buf(), du.buf(), y.buf(), x.buf(), up.buf(), n);
    y.check("swiglu_backward, d_gate aliasing d_out");
    du.check("swiglu_backward d_up (aliased call)");
  }
}

TEST_CASE("bf16 add, accumulate, scale, fill, sum and sum_squares", "[bf16][elementwise]") {
  for (const int n : {13, 100003}) {
    INFO("n=" << n);
    Arg a(random_vec(n, 1), BF16), b(random_vec(n, 2), BF16), out(nan_vec(n), BF16);
    ops().add(out.ref(), a.ref(), b.ref(), n);
    ops().add(out.buf(), a.buf(), b.buf(), n);
    out.check("add");
    ops().add(a.ref(), a.ref(), b.ref(), n);
    ops().add(a.buf(), a.buf(), b.buf(), n);
    a.check("add, out aliasing a");
    ops().scale(a.ref(), 0.37f, n);
    ops().scale(a.buf(), 0.37f, n);
    a.check("scale");
    ops().fill(a.ref(), 1.1f, n);  // not a bf16 value: stored rounded
    ops().fill(a.buf(), 1.1f, n);
    a.check("fill");
    for (const DType acc_type : {F32, BF16}) {
      for (const DType x_type : {F32, BF16}) {
        INFO("acc=" << to_string(acc_type) << " x=" << to_string(x_type));
        Arg acc(random_vec(n, 3), acc_type), x(random_vec(n, 4), x_type);
        ops().accumulate(acc.ref(), x.ref(), n);
        ops().accumulate(acc.buf(), x.buf(), n);
        acc.check("accumulate");
      }
    }
    Arg s(random_vec(n, 5, -3.0f, 3.0f), BF16);
    float got[2], want[2];
    ops().sum(scalar(got[0]), s.buf(), n);
    ops().sum(scalar(want[0]), s.ref(), n);
    ops().sum_squares(scalar(got[1]), s.buf(), n);
    ops().sum_squares(scalar(want[1]), s.ref(), n);
    CHECK(got[0] == want[0]);
    CHECK(got[1] == want[1]);
  }
}

// ------------------------------------------------------------------ cross-entropy

TEST_CASE("bf16 cross_entropy_forward_backward, d_logits separate, aliased or absent",
          "[bf16][cross_entropy]") {
  const int N = 13, V = 1001, Vp = 1024;
  IVec targets = random_ints(N, 2, 0, V - 1);
  targets[1] = -1;                    // ignored row
  for (const int mode : {0, 1, 2}) {  // separate, aliasing logits, loss only
    INFO("mode=" << mode);
    Arg logits(random_vec(N * Vp, 1, -4.0f, 4.0f), BF16), dl(nan_vec(N * Vp), BF16), losses(nan_vec(N), F32);
    const Buf dl_ref = mode == 0 ? dl.ref() : mode == 1 ? logits.ref() : none();
    const Buf dl_buf = mode == 0 ? dl.buf() : mode == 1 ? logits.buf() : none();
    ops().cross_entropy_forward_backward(losses.ref(), dl_ref, logits.ref(), buf(targets), N, V, Vp,
                                         1.0f / N);
    ops().cross_entropy_forward_backward(losses.buf(), dl_buf, logits.buf(), buf(targets), N, V, Vp,
                                         1.0f / N);
    losses.check("losses");
    (mode == 0 ? dl : logits).check("d_logits");
  }
}

// ------------------------------------------------------------------ dtype rules

TEST_CASE("dtype combinations the CUDA ops reject throw on the CPU too", "[bf16][contract][errors]") {
  Vec storage_f1 = random_vec(256, 1), storage_f2 = random_vec(256, 2), storage_f3 = random_vec(256, 3);
  std::vector<std::uint16_t> storage_h1(256), storage_h2(256);
  IVec storage_i(64, 0);
  const Buf f{storage_f1.data(), F32}, g{storage_f2.data(), F32}, s{storage_f3.data(), F32};
  const Buf h{storage_h1.data(), BF16}, k{storage_h2.data(), BF16};
  const Buf i32 = buf(storage_i);
  const auto& o = ops();
  auto rejects = [](auto&& call, const std::string& op, const std::string& what) {
    REQUIRE_THROWS_AS(call(), std::invalid_argument);
    REQUIRE_THROWS_WITH(call(), Contains("cpu " + op + ": ") && Contains(what));
  };
  rejects([&] { o.linear_forward(h, f, g, none(), 2, 2, 2); }, "linear_forward",
          "'out' must be f32 when 'in' is f32");
  rejects([&] { o.linear_forward(f, h, g, none(), 2, 2, 2); }, "linear_forward",
          "'weight' must have the dtype of 'in'");
  rejects([&] { o.linear_forward(f, h, k, h, 2, 2, 2); }, "linear_forward",
          "'bias' must have the dtype of 'out'");
  rejects([&] { o.linear_backward(h, none(), none(), f, none(), g, 2, 2, 2); }, "linear_backward",
          "'d_in' must be f32 when 'd_out' is f32");
  rejects([&] { o.linear_backward(none(), f, none(), h, g, none(), 2, 2, 2); }, "linear_backward",
          "'in' must have the dtype of 'd_out'");
  rejects([&] { o.linear_backward(none(), none(), i32, h, none(), none(), 2, 2, 2); }, "linear_backward",
          "'d_bias' must be f32 or bf16");
  rejects([&] { o.embedding_forward(f, i32, h, none(), 2, 2, 2); }, "embedding_forward",
          "'table' must have the dtype of 'out'");
  rejects([&] { o.embedding_forward(h, i32, k, g, 2, 2, 2); }, "embedding_forward",
          "'positions' must have the dtype of 'out'");
  rejects([&] { o.embedding_backward(f, h, g, i32, 2, 2, 2); }, "embedding_backward",
          "'d_positions' must have the dtype of 'd_table'");
  rejects([&] { o.layernorm_forward(f, none(), none(), h, g, none(), 2, 2, 1e-5f); }, "layernorm_forward",
          "'in' must have the dtype of 'out'");
  rejects([&] { o.layernorm_forward(h, none(), none(), k, f, h, 2, 2, 1e-5f); }, "layernorm_forward",
          "'bias' must have the dtype of 'weight'");
  rejects([&] { o.layernorm_forward(h, k, none(), h, f, none(), 2, 2, 1e-5f); }, "layernorm_forward",
          "'mean' must be f32");
  rejects([&] { o.layernorm_backward(none(), f, h, g, s, f, g, s, 2, 2); }, "layernorm_backward",
          "'d_bias' must have the dtype of 'd_weight'");
  rejects([&] { o.layernorm_backward(none(), none(), none(), h, f, g, s, f, 2, 2); }, "layernorm_backward",
          "'d_out' must have the dtype of 'in'");
  rejects([&] { o.layernorm_backward(f, none(), none(), h, k, g, s, f, 2, 2); }, "layernorm_backward",
          "'d_in' must have the dtype of 'in'");
  rejects([&] { o.rmsnorm_forward(f, none(), h, g, 2, 2, 1e-5f); }, "rmsnorm_forward",
          "'in' must have the dtype of 'out'");
  rejects([&] { o.rmsnorm_backward(none(), f, h, k, g, h, 2, 2); }, "rmsnorm_backward", "'rstd' must be f32");
  rejects([&] { o.rmsnorm_backward(f, none(), h, k, g, s, 2, 2); }, "rmsnorm_backward",
          "'d_in' must have the dtype of 'in'");
  rejects([&] { o.rope_forward(i32, 1, 2, 1, 2, 1e4f, 0); }, "rope_forward", "'x' must be f32 or bf16");
  const auto kAttention = AttentionShape::self_attention(1, 2, 1, 1, 2);
  rejects([&] { o.attention_forward(h, none(), h, f, k, kAttention); }, "attention_forward",
          "'k' must be bf16, got f32");
  rejects([&] { o.attention_forward(f, none(), h, k, h, kAttention); }, "attention_forward",
          "'out' must be bf16, got f32");
  rejects([&] { o.attention_forward(h, k, h, k, h, kAttention); }, "attention_forward", "'lse' must be f32");
  rejects([&] { o.attention_backward(h, f, h, h, h, h, h, h, s, kAttention); }, "attention_backward",
          "'d_k' must be bf16, got f32");
  rejects([&] { o.attention_backward(h, h, h, h, h, h, h, h, k, kAttention); }, "attention_backward",
          "'lse' must be f32");
  rejects([&] { o.gelu_forward(f, h, 4); }, "gelu_forward", "'in' must have the dtype of 'out'");
  rejects([&] { o.gelu_backward(h, k, f, 4); }, "gelu_backward", "'in' must have the dtype of 'd_in'");
  rejects([&] { o.swiglu_forward(h, k, f, 4); }, "swiglu_forward", "'up' must have the dtype of 'out'");
  rejects([&] { o.swiglu_backward(h, f, h, k, h, 4); }, "swiglu_backward",
          "'d_up' must have the dtype of 'd_gate'");
  rejects([&] { o.add(h, f, k, 4); }, "add", "'a' must have the dtype of 'out'");
  rejects([&] { o.accumulate(i32, h, 4); }, "accumulate", "'acc' must be f32 or bf16");
  rejects([&] { o.accumulate(h, i32, 4); }, "accumulate", "'x' must be f32 or bf16");
  rejects([&] { o.scale(i32, 2.0f, 4); }, "scale", "'x' must be f32 or bf16");
  rejects([&] { o.fill(i32, 2.0f, 4); }, "fill", "'x' must be f32 or bf16");
  rejects([&] { o.cross_entropy_forward_backward(f, h, g, i32, 2, 2, 2, 1.0f); },
          "cross_entropy_forward_backward", "'d_logits' must have the dtype of 'logits'");
  rejects([&] { o.cross_entropy_forward_backward(h, k, h, i32, 2, 2, 2, 1.0f); },
          "cross_entropy_forward_backward", "'losses' must be f32");
  rejects([&] { o.adamw_step(h, f, g, s, Buf{}, 4, {0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1, 1.0f}); }, "adamw_step",
          "'param' must be f32");
  rejects([&] { o.adamw_step(f, h, g, s, Buf{}, 4, {0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1, 1.0f}); }, "adamw_step",
          "'grad' must be f32");
  rejects([&] { o.sum_squares(f, i32, 4); }, "sum_squares", "'x' must be f32 or bf16");
  rejects([&] { o.sum(i32, f, 4); }, "sum", "'out' must be f32");
}
