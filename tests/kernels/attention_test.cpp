// attention_forward / attention_backward against an explicit Tq x Tk softmax in double (GQA,
// Hq == Hkv and Hkv == 1; T crossing the kernel's 32-row and 64-key blocks; queries offset into longer
// keys, as context parallelism calls it), finite differences, and causality.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using ptrain::kernels::AttentionShape;

namespace {

// T query rows; Tk keys (0: T) of which query i sees 0 .. pos0 + i.
struct Shape {
  int B, T, Hq, Hkv, D;
  int Tk = 0, pos0 = 0;
  int keys() const { return Tk > 0 ? Tk : T; }
  AttentionShape op() const { return {B, T, keys(), pos0, Hq, Hkv, D}; }
  std::size_t q_size() const { return std::size_t(B) * T * Hq * D; }
  std::size_t kv_size() const { return std::size_t(B) * keys() * Hkv * D; }
  std::size_t qi(int b, int t, int h) const { return ((std::size_t(b) * T + t) * Hq + h) * D; }
  std::size_t ki(int b, int t, int h) const { return ((std::size_t(b) * keys() + t) * Hkv + h) * D; }
};

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << "B=" << s.B << " T=" << s.T << " Tk=" << s.keys() << " pos0=" << s.pos0 << " Hq=" << s.Hq
            << " Hkv=" << s.Hkv << " D=" << s.D;
}

struct Inputs {
  Vec q, k, v;
};

Inputs random_inputs(const Shape& s, std::uint32_t seed) {
  return {random_vec(s.q_size(), seed, -2.0f, 2.0f), random_vec(s.kv_size(), seed + 1, -2.0f, 2.0f),
          random_vec(s.kv_size(), seed + 2)};
}

// Full probability matrix P[b][h] (T x Tk) in double.
std::vector<DVec> naive_probs(const Shape& s, const Inputs& in, DVec* lse) {
  const double scale = 1.0 / std::sqrt(double(s.D));
  std::vector<DVec> probs;
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.Hq; ++h) {
      const int hk = h / (s.Hq / s.Hkv);
      const int tk = s.keys();
      DVec p(std::size_t(s.T) * tk, 0.0);
      for (int i = 0; i < s.T; ++i) {
        double mx = -1e300;
        for (int j = 0; j <= s.pos0 + i; ++j) {
          double dot = 0.0;
          for (int d = 0; d < s.D; ++d) dot += double(in.q[s.qi(b, i, h) + d]) * in.k[s.ki(b, j, hk) + d];
          p[i * tk + j] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        double sum = 0.0;
        for (int j = 0; j <= s.pos0 + i; ++j) sum += std::exp(p[i * tk + j] - mx);
        for (int j = 0; j <= s.pos0 + i; ++j) p[i * tk + j] = std::exp(p[i * tk + j] - mx) / sum;
        (*lse)[(std::size_t(b) * s.Hq + h) * s.T + i] = mx + std::log(sum);
      }
      probs.push_back(std::move(p));
    }
  }
  return probs;
}

DVec naive_out(const Shape& s, const Inputs& in, const std::vector<DVec>& probs) {
  DVec out(s.q_size(), 0.0);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.Hq; ++h) {
      const int hk = h / (s.Hq / s.Hkv);
      const DVec& p = probs[std::size_t(b) * s.Hq + h];
      for (int i = 0; i < s.T; ++i) {
        for (int j = 0; j <= s.pos0 + i; ++j) {
          for (int d = 0; d < s.D; ++d)
            out[s.qi(b, i, h) + d] += p[i * s.keys() + j] * in.v[s.ki(b, j, hk) + d];
        }
      }
    }
  }
  return out;
}

struct Grads {
  DVec dq, dk, dv;
};

Grads naive_backward(const Shape& s, const Inputs& in, const std::vector<DVec>& probs, const Vec& dout) {
  const double scale = 1.0 / std::sqrt(double(s.D));
  Grads g{DVec(s.q_size(), 0.0), DVec(s.kv_size(), 0.0), DVec(s.kv_size(), 0.0)};
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.Hq; ++h) {
      const int hk = h / (s.Hq / s.Hkv);
      const DVec& p = probs[std::size_t(b) * s.Hq + h];
      const int tk = s.keys();
      for (int i = 0; i < s.T; ++i) {
        DVec dp(tk, 0.0);
        double row_dot = 0.0;  // sum_j P_ij dP_ij
        for (int j = 0; j <= s.pos0 + i; ++j) {
          for (int d = 0; d < s.D; ++d) dp[j] += double(dout[s.qi(b, i, h) + d]) * in.v[s.ki(b, j, hk) + d];
          row_dot += p[i * tk + j] * dp[j];
        }
        for (int j = 0; j <= s.pos0 + i; ++j) {
          const double ds = p[i * tk + j] * (dp[j] - row_dot);
          for (int d = 0; d < s.D; ++d) {
            g.dv[s.ki(b, j, hk) + d] += p[i * tk + j] * dout[s.qi(b, i, h) + d];
            g.dq[s.qi(b, i, h) + d] += scale * ds * in.k[s.ki(b, j, hk) + d];
            g.dk[s.ki(b, j, hk) + d] += scale * ds * in.q[s.qi(b, i, h) + d];
          }
        }
      }
    }
  }
  return g;
}

struct Outputs {
  Vec out, lse;
};

Outputs run_forward(const Shape& s, const Inputs& in) {
  Outputs o{nan_vec(s.q_size()), nan_vec(std::size_t(s.B) * s.Hq * s.T)};
  ops().attention_forward(buf(o.out), buf(o.lse), buf(in.q), buf(in.k), buf(in.v), s.op());
  return o;
}

struct KernelGrads {
  Vec dq, dk, dv;
};

KernelGrads run_backward(const Shape& s, const Inputs& in, const Outputs& o, const Vec& dout) {
  KernelGrads g{nan_vec(s.q_size()), nan_vec(s.kv_size()), nan_vec(s.kv_size())};
  ops().attention_backward(buf(g.dq), buf(g.dk), buf(g.dv), buf(dout), buf(in.q), buf(in.k), buf(in.v),
                           buf(o.out), buf(o.lse), s.op());
  return g;
}

const Shape kShapes[] = {
    {2, 5, 6, 2, 6},     // GQA, group 3
    {1, 7, 3, 3, 4},     // Hq == Hkv
    {2, 9, 4, 1, 8},     // one kv head (MQA)
    {1, 33, 2, 1, 5},    // crosses the 32-row block
    {2, 70, 2, 2, 64},   // crosses the 64-key block, GPT-2 head dim
    {1, 150, 4, 2, 16},  // several blocks of each
    // Queries offset into longer keys: a context-parallel chunk (the last of four: Tk = 4 T), a
    // middle chunk whose later keys nobody sees, offsets that cross the blocks unaligned.
    {2, 9, 4, 2, 8, 36, 27},
    {1, 40, 2, 1, 16, 160, 40},
    {1, 37, 3, 3, 8, 120, 45},
    {2, 20, 2, 1, 8, 80, 0},  // the first chunk: no offset, three quarters of the keys unseen
};

}  // namespace

TEST_CASE("attention_forward matches an explicit softmax", "[attention]") {
  for (const Shape& s : kShapes) {
    INFO(s);
    const Inputs in = random_inputs(s, 1);
    DVec ref_lse(std::size_t(s.B) * s.Hq * s.T);
    const auto probs = naive_probs(s, in, &ref_lse);
    const Outputs o = run_forward(s, in);
    check_close(o.out, naive_out(s, in, probs), 1e-5, 1e-5, "out");
    check_close(o.lse, ref_lse, 1e-5, 1e-5, "lse");
    Vec out_only = nan_vec(s.q_size());  // lse is optional
    ops().attention_forward(buf(out_only), none(), buf(in.q), buf(in.k), buf(in.v), s.op());
    check_close(out_only, o.out, 0.0, 0.0, "out without lse");
  }
}

TEST_CASE("attention_backward matches the explicit gradient", "[attention]") {
  for (const Shape& s : kShapes) {
    INFO(s);
    const Inputs in = random_inputs(s, 11);
    DVec ref_lse(std::size_t(s.B) * s.Hq * s.T);
    const auto probs = naive_probs(s, in, &ref_lse);
    const Vec dout = random_vec(s.q_size(), 14);
    const Grads ref = naive_backward(s, in, probs, dout);
    const Outputs o = run_forward(s, in);
    const KernelGrads g = run_backward(s, in, o, dout);
    check_close(g.dq, ref.dq, 1e-5, 1e-4, "d_q");
    check_close(g.dk, ref.dk, 1e-5, 1e-4, "d_k");
    check_close(g.dv, ref.dv, 1e-5, 1e-4, "d_v");
    // Overwritten, not accumulated: a second call gives the same bits.
    const KernelGrads again = run_backward(s, in, o, dout);
    check_close(again.dq, g.dq, 0.0, 0.0, "d_q again");
    check_close(again.dk, g.dk, 0.0, 0.0, "d_k again");
    check_close(again.dv, g.dv, 0.0, 0.0, "d_v again");
  }
}

TEST_CASE("attention_backward passes finite differences", "[attention][grad]") {
  for (const Shape& s : {kShapes[0], kShapes[2], kShapes[3], kShapes[6], kShapes[8]}) {
    INFO(s);
    Inputs in = random_inputs(s, 21);
    const Vec r = random_vec(s.q_size(), 24);
    const Outputs o = run_forward(s, in);
    const KernelGrads g = run_backward(s, in, o, r);
    auto loss = [&] { return weighted_sum(run_forward(s, in).out, r); };
    check_grad("d_q", in.q, g.dq, loss, 150);
    check_grad("d_k", in.k, g.dk, loss, 150);
    check_grad("d_v", in.v, g.dv, loss, 150);
  }
}

TEST_CASE("attention is causal: future keys change no earlier row", "[attention]") {
  const Shape s{2, 75, 4, 2, 8};
  const int t0 = 40;
  Inputs in = random_inputs(s, 31);
  const Outputs before = run_forward(s, in);
  Inputs changed = in;
  const Vec noise = random_vec(s.kv_size(), 33, -3.0f, 3.0f);
  for (int b = 0; b < s.B; ++b) {
    for (int t = t0 + 1; t < s.T; ++t) {
      for (int h = 0; h < s.Hkv; ++h) {
        for (int d = 0; d < s.D; ++d) {
          changed.k[s.ki(b, t, h) + d] = noise[s.ki(b, t, h) + d];
          changed.v[s.ki(b, t, h) + d] = -noise[s.ki(b, t, h) + d];
        }
      }
    }
  }
  const Outputs after = run_forward(s, changed);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.Hq; ++h) {
      for (int t = 0; t < s.T; ++t) {
        const std::size_t li = (std::size_t(b) * s.Hq + h) * s.T + t;
        bool same = before.lse[li] == after.lse[li];
        for (int d = 0; d < s.D; ++d)
          same = same && before.out[s.qi(b, t, h) + d] == after.out[s.qi(b, t, h) + d];
        INFO("b=" << b << " h=" << h << " t=" << t);
        if (t <= t0) REQUIRE(same);
      }
    }
  }

  // A gradient that flows only from rows <= t0 reaches no later key, value or query.
  Vec dout = random_vec(s.q_size(), 34);
  for (int b = 0; b < s.B; ++b) {
    for (int t = t0 + 1; t < s.T; ++t) {
      for (int h = 0; h < s.Hq; ++h) std::fill_n(dout.begin() + std::ptrdiff_t(s.qi(b, t, h)), s.D, 0.0f);
    }
  }
  const KernelGrads g = run_backward(s, in, before, dout);
  for (int b = 0; b < s.B; ++b) {
    for (int t = t0 + 1; t < s.T; ++t) {
      for (int h = 0; h < s.Hkv; ++h) {
        for (int d = 0; d < s.D; ++d) {
          REQUIRE(g.dk[s.ki(b, t, h) + d] == 0.0f);
          REQUIRE(g.dv[s.ki(b, t, h) + d] == 0.0f);
        }
      }
      for (int h = 0; h < s.Hq; ++h) {
        for (int d = 0; d < s.D; ++d) REQUIRE(g.dq[s.qi(b, t, h) + d] == 0.0f);
      }
    }
  }
}

TEST_CASE("attention rejects Hq not a multiple of Hkv", "[attention][errors]") {
  const Shape s{1, 2, 3, 2, 4};
  const Inputs in{Vec(s.q_size()), Vec(s.q_size()), Vec(s.q_size())};
  Vec out(s.q_size()), lse(6);
  REQUIRE_THROWS_AS(ops().attention_forward(buf(out), buf(lse), buf(in.q), buf(in.k), buf(in.v), s.op()),
                    std::invalid_argument);
}

TEST_CASE("attention rejects queries positioned past the keys", "[attention][errors]") {
  const Shape s{1, 4, 2, 1, 4, 6, 3};  // positions 3 .. 6 of 6 keys
  const Inputs in = random_inputs(s, 41);
  Vec out(s.q_size()), lse(8);
  REQUIRE_THROWS_WITH(ops().attention_forward(buf(out), buf(lse), buf(in.q), buf(in.k), buf(in.v), s.op()),
                      Catch::Contains("q_pos0 + Tq must not exceed Tk"));
}
