// attention_forward / attention_backward against an explicit Tq x Tk softmax in double (GQA,
// Hq == Hkv and Hkv == 1; T crossing the kernel's 32-row and 64-key blocks; queries offset into longer
// keys, as context parallelism calls it; queries past the keys, ring attention's blocks), finite
// differences, and causality. attention_merge: ring attention's composition of blocks, and rows that
// saw no key yet.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using ptrain::kernels::AttentionShape;

namespace {

// T query rows; Tk keys (0: T) of which query i sees 0 .. min(pos0 + i, Tk - 1).
struct Shape {
  int B, T, Hq, Hkv, D;
  int Tk = 0, pos0 = 0;
  int keys() const { return Tk > 0 ? Tk : T; }
  int last_key(int i) const { return std::min(pos0 + i, keys() - 1); }
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
        for (int j = 0; j <= s.last_key(i); ++j) {
          double dot = 0.0;
          for (int d = 0; d < s.D; ++d) dot += double(in.q[s.qi(b, i, h) + d]) * in.k[s.ki(b, j, hk) + d];
          p[i * tk + j] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        double sum = 0.0;
        for (int j = 0; j <= s.last_key(i); ++j) sum += std::exp(p[i * tk + j] - mx);
        for (int j = 0; j <= s.last_key(i); ++j) p[i * tk + j] = std::exp(p[i * tk + j] - mx) / sum;
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
        for (int j = 0; j <= s.last_key(i); ++j) {
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
        for (int j = 0; j <= s.last_key(i); ++j) {
          for (int d = 0; d < s.D; ++d) dp[j] += double(dout[s.qi(b, i, h) + d]) * in.v[s.ki(b, j, hk) + d];
          row_dot += p[i * tk + j] * dp[j];
        }
        for (int j = 0; j <= s.last_key(i); ++j) {
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
    // Queries past the keys (pos0 + T > Tk): ring attention's blocks. Full blocks, where every row sees
    // every key (pos0 = Tk, the chunk right after the keys'; pos0 = Tk - 1, the least full one; pos0 far
    // past); Tk off the 32/64 blocks, T != Tk; and a block causal for its first rows and full for the rest.
    {2, 9, 4, 2, 8, 9, 9},       // GQA, T == Tk
    {1, 40, 2, 1, 16, 33, 32},   // pos0 = Tk - 1, Tk just past a block
    {1, 37, 3, 3, 8, 70, 1000},  // far past, T < Tk
    {2, 70, 2, 2, 64, 45, 45},   // T > Tk, crosses the 64-key block
    {1, 50, 4, 1, 8, 30, 10},    // MQA; rows 0 .. 19 causal, 20 .. 49 see all 30 keys
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
  for (const Shape& s :
       {kShapes[0], kShapes[2], kShapes[3], kShapes[6], kShapes[8], kShapes[10], kShapes[14]}) {
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

TEST_CASE("attention of queries past every key: all rows see all keys, wherever they sit", "[attention]") {
  // (kShapes' blocks past the keys check the values against the explicit softmax.) A full block is the
  // same op for every pos0 >= Tk - 1, bit for bit, and every key gets a gradient.
  const Shape base{2, 30, 4, 2, 8, 45, 44};
  const Inputs in = random_inputs(base, 51);
  const Vec dout = random_vec(base.q_size(), 54);
  const Outputs o = run_forward(base, in);
  const KernelGrads g = run_backward(base, in, o, dout);
  for (const int pos0 : {45, 46, 1000, 1 << 30}) {
    Shape s = base;
    s.pos0 = pos0;
    INFO(s);
    const Outputs o2 = run_forward(s, in);
    const KernelGrads g2 = run_backward(s, in, o2, dout);
    check_close(o2.out, o.out, 0.0, 0.0, "out");
    check_close(o2.lse, o.lse, 0.0, 0.0, "lse");
    check_close(g2.dq, g.dq, 0.0, 0.0, "d_q");
    check_close(g2.dk, g.dk, 0.0, 0.0, "d_k");
    check_close(g2.dv, g.dv, 0.0, 0.0, "d_v");
  }
  for (int b = 0; b < base.B; ++b) {
    for (int t = 0; t < base.keys(); ++t) {
      for (int h = 0; h < base.Hkv; ++h) {
        INFO("b=" << b << " key " << t << " h=" << h);
        bool seen = false;
        for (int d = 0; d < base.D; ++d) seen = seen || g.dv[base.ki(b, t, h) + d] != 0.0f;
        REQUIRE(seen);
      }
    }
  }
}

TEST_CASE("attention rejects queries without keys", "[attention][errors]") {
  const Vec q = random_vec(8, 41), out(8), lse(8), kv(1);
  // Tq = 4 queries at positions 3 .., Tk = 0.
  const AttentionShape s{1, 4, 0, 3, 2, 1, 1};
  REQUIRE_THROWS_WITH(ops().attention_forward(buf(out), buf(lse), buf(q), buf(kv), buf(kv), s),
                      Catch::Contains("Tk must be positive"));
  Vec dq(8), dk(1), dv(1);
  REQUIRE_THROWS_WITH(ops().attention_backward(buf(dq), buf(dk), buf(dv), buf(q), buf(q), buf(kv), buf(kv),
                                               buf(out), buf(lse), s),
                      Catch::Contains("Tk must be positive"));
  // No queries and no keys: nothing to do.
  const AttentionShape empty{1, 0, 0, 3, 2, 1, 1};
  REQUIRE_NOTHROW(ops().attention_forward(buf(out), buf(lse), buf(q), buf(kv), buf(kv), empty));
}

namespace {

// Rows [t0, t0 + n) of x [B, T, H, D].
Vec rows_of(const Vec& x, int B, int T, int H, int D, int t0, int n) {
  const std::size_t row = std::size_t(H) * D;
  Vec out;
  out.reserve(std::size_t(B) * n * row);
  for (int b = 0; b < B; ++b) {
    const auto first = x.begin() + std::ptrdiff_t((std::size_t(b) * T + t0) * row);
    out.insert(out.end(), first, first + std::ptrdiff_t(n * row));
  }
  return out;
}

}  // namespace

TEST_CASE("attention_merge composes ring attention's blocks into the causal attention",
          "[attention][merge]") {
  // Queries at positions L .. 2L - 1 over keys 0 .. 2L - 1, as two blocks: the full block over keys
  // 0 .. L - 1 (q_pos0 = L) merged with the diagonal block over keys L .. 2L - 1 (q_pos0 = 0).
  const int B = 2, L = 37, Hq = 4, Hkv = 2, D = 16;
  const Shape whole{B, L, Hq, Hkv, D, 2 * L, L};
  const Inputs in = random_inputs(whole, 61);
  const Outputs ref = run_forward(whole, in);
  const Inputs early{in.q, rows_of(in.k, B, 2 * L, Hkv, D, 0, L), rows_of(in.v, B, 2 * L, Hkv, D, 0, L)};
  const Inputs late{in.q, rows_of(in.k, B, 2 * L, Hkv, D, L, L), rows_of(in.v, B, 2 * L, Hkv, D, L, L)};
  const Shape full{B, L, Hq, Hkv, D, L, L}, diagonal{B, L, Hq, Hkv, D, L, 0};
  Outputs merged = run_forward(full, early);
  const Outputs part = run_forward(diagonal, late);
  ops().attention_merge(buf(merged.out), buf(merged.lse), buf(part.out), buf(part.lse), B, L, Hq, D);
  check_close(merged.out, ref.out, 1e-5, 1e-5, "merged out");
  check_close(merged.lse, ref.lse, 1e-5, 1e-5, "merged lse");

  // Backward: each block with the merged out and lse gives its keys' gradients and its share of d_q.
  const Vec dout = random_vec(whole.q_size(), 64);
  const KernelGrads g = run_backward(whole, in, ref, dout);
  const KernelGrads g_full = run_backward(full, early, merged, dout);
  const KernelGrads g_diag = run_backward(diagonal, late, merged, dout);
  check_close(plus(g_full.dq, g_diag.dq), g.dq, 1e-5, 1e-4, "d_q, summed over the blocks");
  check_close(g_full.dk, rows_of(g.dk, B, 2 * L, Hkv, D, 0, L), 1e-5, 1e-4, "d_k of the early keys");
  check_close(g_full.dv, rows_of(g.dv, B, 2 * L, Hkv, D, 0, L), 1e-5, 1e-4, "d_v of the early keys");
  check_close(g_diag.dk, rows_of(g.dk, B, 2 * L, Hkv, D, L, L), 1e-5, 1e-4, "d_k of the late keys");
  check_close(g_diag.dv, rows_of(g.dv, B, 2 * L, Hkv, D, L, L), 1e-5, 1e-4, "d_v of the late keys");
}

TEST_CASE("attention_merge: a row that saw no key takes the part as it is", "[attention][merge]") {
  const int B = 1, T = 3, H = 2, D = 5;
  const float inf = std::numeric_limits<float>::infinity();
  // [B, H, T]: rows whose out saw no key yet (lse -inf, out garbage), rows where neither part saw one,
  // rows where both did, and one where only out did.
  const Vec lse_before{-inf, -inf, 1.5f, 0.25f, 0.7f, -inf};
  const Vec part_lse{0.5f, -inf, 2.0f, 1.0f, -inf, -3.0f};
  const Vec part = random_vec(std::size_t(B) * T * H * D, 71);
  const Vec prior = random_vec(part.size(), 72);
  Vec out = nan_vec(part.size()), lse = lse_before;
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < T; ++t) {
      const std::size_t at = (std::size_t(t) * H + h) * D;
      if (lse[std::size_t(h) * T + t] != -inf)
        std::copy_n(prior.begin() + std::ptrdiff_t(at), D, out.begin() + std::ptrdiff_t(at));
    }
  }
  const Vec out_before = out;
  ops().attention_merge(buf(out), buf(lse), buf(part), buf(part_lse), B, T, H, D);
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < T; ++t) {
      INFO("t=" << t << " h=" << h);
      const std::size_t li = std::size_t(h) * T + t, at = (std::size_t(t) * H + h) * D;
      const double la = lse_before[li], lb = part_lse[li];
      if (la == -inf && lb == -inf) {  // neither saw a key: left alone
        CHECK(lse[li] == -inf);
        for (int d = 0; d < D; ++d) CHECK(std::isnan(out[at + d]));
        continue;
      }
      const double m = std::max(la, lb), wa = std::exp(la - m), wb = std::exp(lb - m);
      CHECK(lse[li] == Approx(m + std::log(wa + wb)).epsilon(1e-6));
      for (int d = 0; d < D; ++d) {
        if (la == -inf) {
          CHECK(out[at + d] == part[at + d]);  // copied: the garbage is gone
        } else {
          CHECK(out[at + d] ==
                Approx((wa * out_before[at + d] + wb * part[at + d]) / (wa + wb)).epsilon(1e-5));
        }
      }
    }
  }
}
