// The MoE ops: routing against a hand-worked example (top-k, renormalised weights, the capacity's
// position order, the counts), the router's backward against finite differences of the weights and
// of the load-balancing loss, dispatch and combine as each other's adjoints, BF16 rows against F32,
// and bad arguments.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels;
using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;

namespace {

struct Routed {
  Vec probs, weight, counts;
  IVec choice, slot;
};

// All E experts here unless `first`, `here` name a range.
Routed route(const Vec& logits, int B, int T, int E, int k, int capacity, int first = 0, int here = 0) {
  const std::size_t N = static_cast<std::size_t>(B) * T;
  Routed r{nan_vec(N * E), nan_vec(N * k), nan_vec(static_cast<std::size_t>(B) * E), IVec(N * k, 99),
           IVec(N * k, 99)};
  ops().moe_route(buf(r.probs), buf(r.choice), buf(r.weight), buf(r.slot), buf(r.counts), buf(logits), B, T,
                  E, k, capacity, first, here > 0 ? here : E);
  return r;
}

}  // namespace

TEST_CASE("moe_route: softmax, top-k renormalised, capacity in position order, counts", "[moe]") {
  // One sequence of 3 tokens, 3 experts, top 2, capacity 2: every token prefers expert 0, so the third
  // token's first choice is dropped; expert 2 is second choice of tokens 0 and 2.
  const Vec logits = {2.0f, 0.0f,  1.0f,  //
                      3.0f, 2.5f,  0.0f,  //
                      1.0f, -1.0f, 0.5f};
  const Routed r = route(logits, 1, 3, 3, 2, 2);
  for (int n = 0; n < 3; ++n) {
    double z = 0;
    for (int e = 0; e < 3; ++e) z += std::exp(static_cast<double>(logits[n * 3 + e]));
    for (int e = 0; e < 3; ++e)
      CHECK(r.probs[n * 3 + e] == Approx(std::exp(static_cast<double>(logits[n * 3 + e])) / z).epsilon(1e-6));
  }
  CHECK(r.choice == IVec{0, 2, 0, 1, 0, 2});
  const double p00 = r.probs[0], p02 = r.probs[2];
  CHECK(r.weight[0] == Approx(p00 / (p00 + p02)).epsilon(1e-6));
  CHECK(r.weight[0] + r.weight[1] == Approx(1.0).epsilon(1e-6));
  // Rows: expert e's slots start at e * capacity (one sequence).
  CHECK(r.slot == IVec{0, 4, 1, 2, -1, 5});
  CHECK(r.counts == Vec{3.0f, 1.0f, 2.0f});

  SECTION("each sequence has its own capacity; ties go to the lower index") {
    const Vec flat(2 * 2 * 4, 0.0f);  // B = 2, T = 2, E = 4, all equal
    const Routed t = route(flat, 2, 2, 4, 2, 1);
    CHECK(t.choice == IVec{0, 1, 0, 1, 0, 1, 0, 1});
    CHECK(t.weight == Vec(8, 0.5f));
    // per_expert = B * capacity = 2: expert 0 of sequence 1 is row 0*2 + 1.
    CHECK(t.slot == IVec{0, 2, -1, -1, 1, 3, -1, -1});
    CHECK(t.counts == Vec{2, 2, 0, 0, 2, 2, 0, 0});
  }

  SECTION("a buffer of some experts: the others' pairs get no slot, the rest are renumbered from 0") {
    const Routed mine = route(logits, 1, 3, 3, 2, 2, /*first=*/1, /*here=*/2);
    CHECK(mine.choice == r.choice);
    CHECK(mine.weight == r.weight);
    CHECK(mine.counts == r.counts);
    CHECK(mine.slot == IVec{-1, 2, -1, 0, -1, 3});  // expert 1 from row 0, expert 2 from row 2
  }
}

TEST_CASE("moe_route_backward passes finite differences of the weights and the balancing loss",
          "[moe][grad]") {
  const int B = 2, T = 5, E = 4, k = 2, capacity = 3;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  Vec logits = random_vec(N * E, 3, -2.0f, 2.0f);
  const Vec r = random_vec(N * k, 4);  // the loss's gradient at the weights
  const float aux_scale = 0.3f;
  const Routed at = route(logits, B, T, E, k, capacity);
  // The loss: sum r * weight + aux_scale * sum_b E * sum_e counts/T * mean_t probs, with the choices and
  // counts of the unperturbed point (piecewise constant; the perturbation stays within a piece).
  auto loss = [&]() {
    const Routed x = route(logits, B, T, E, k, capacity);
    REQUIRE(x.choice == at.choice);
    double l = weighted_sum(x.weight, r);
    for (int b = 0; b < B; ++b)
      for (int e = 0; e < E; ++e) {
        double mean = 0;
        for (int t = 0; t < T; ++t) mean += x.probs[(static_cast<std::size_t>(b) * T + t) * E + e] / T;
        l += aux_scale * E * at.counts[static_cast<std::size_t>(b) * E + e] / T * mean;
      }
    return l;
  };
  for (const DType t : {F32, BF16}) {
    INFO("d_logits " << to_string(t));
    HostTensor d_logits(nan_vec(N * E), t);
    ops().moe_route_backward(d_logits.buf(), buf(r), buf(at.probs), buf(at.choice), buf(at.weight),
                             buf(at.counts), B, T, E, k, aux_scale);
    check_grad("moe_route_backward", logits, d_logits.values(), loss, 400, t == BF16 ? 1e-2 : 5e-4, 1e-2);
  }
}

TEST_CASE("moe_scatter and moe_combine are adjoint, and d_weight is the dot product", "[moe]") {
  const int N = 7, k = 2, C = 5, R = 10;
  // Distinct slots below R (row 9 unused), five dropped pairs (both of token 6's).
  const IVec slot = {3, 0, 8, -1, 1, 2, 7, 5, -1, 4, 6, -1, -1, -1};
  const Vec w = random_vec(N * k, 5, 0.1f, 1.0f);
  const Vec x = random_vec(static_cast<std::size_t>(N) * C, 6);
  const Vec y = random_vec(static_cast<std::size_t>(R) * C, 7);
  Vec rows = nan_vec(static_cast<std::size_t>(R) * C), d_w = nan_vec(N * k);
  ops().moe_scatter(buf(rows), buf(d_w), buf(x), buf(y), buf(slot), buf(w), N, k, R, C);
  Vec out = nan_vec(static_cast<std::size_t>(N) * C);
  ops().moe_combine(buf(out), buf(y), buf(slot), buf(w), N, k, C);
  // <scatter(x), y> == <x, combine(y)>, both with the weights.
  CHECK(weighted_sum(rows, y) == Approx(weighted_sum(out, x)).epsilon(1e-6));
  for (int i = 0; i < N * k; ++i) {
    const int s = slot[static_cast<std::size_t>(i)];
    double dot = 0;
    for (int c = 0; c < C && s >= 0; ++c)
      dot += static_cast<double>(x[static_cast<std::size_t>(i / k * C + c)]) *
             y[static_cast<std::size_t>(s * C + c)];
    CHECK(d_w[static_cast<std::size_t>(i)] == Approx(dot).margin(1e-6));
  }
  // Rows no pair holds are zero; without weights a row is the token itself.
  Vec plain = nan_vec(static_cast<std::size_t>(R) * C);
  ops().moe_scatter(buf(plain), none(), buf(x), none(), buf(slot), none(), N, k, R, C);
  for (int c = 0; c < C; ++c) {
    CHECK(plain[static_cast<std::size_t>(3 * C + c)] == x[static_cast<std::size_t>(c)]);
    CHECK(plain[static_cast<std::size_t>(0 * C + c)] == x[static_cast<std::size_t>(c)]);
    CHECK(plain[static_cast<std::size_t>(8 * C + c)] == x[static_cast<std::size_t>(C + c)]);
    CHECK(plain[static_cast<std::size_t>(9 * C + c)] == 0.0f);
    CHECK(out[static_cast<std::size_t>(6 * C + c)] == 0.0f);  // every choice dropped
  }

  SECTION("bf16 rows: the f32 arithmetic on the rounded values, rounded once") {
    HostTensor x16(x, BF16), y16(y, BF16), rows16(nan_vec(static_cast<std::size_t>(R) * C), BF16),
        out16(nan_vec(static_cast<std::size_t>(N) * C), BF16);
    ops().moe_scatter(rows16.buf(), none(), x16.buf(), none(), buf(slot), buf(w), N, k, R, C);
    ops().moe_combine(out16.buf(), y16.buf(), buf(slot), buf(w), N, k, C);
    Vec ref_rows = nan_vec(rows.size()), ref_out = nan_vec(out.size());
    ops().moe_scatter(buf(ref_rows), none(), buf(x16.values()), none(), buf(slot), buf(w), N, k, R, C);
    ops().moe_combine(buf(ref_out), buf(y16.values()), buf(slot), buf(w), N, k, C);
    check_close(rows16.values(), as_dtype(ref_rows, BF16), 0.0, 0.0, "moe_scatter bf16");
    check_close(out16.values(), as_dtype(ref_out, BF16), 0.0, 0.0, "moe_combine bf16");
  }
}

TEST_CASE("moe ops reject bad arguments with the op's name", "[moe][contract][errors]") {
  Vec f(64, 0.0f);
  IVec i(64, 0);
  const Buf fb = buf(f), ib = buf(i);
  REQUIRE_THROWS_WITH(ops().moe_route(fb, ib, fb, ib, fb, fb, 1, 2, 4, 2, 1, 3, 2),
                      Contains("moe_route: the experts here must be a non-empty range"));
  REQUIRE_THROWS_WITH(ops().moe_route(fb, ib, fb, ib, fb, fb, 1, 2, 4, 5, 1, 0, 4),
                      Contains("moe_route: k must be"));
  REQUIRE_THROWS_WITH(ops().moe_route(fb, fb, fb, ib, fb, fb, 1, 2, 4, 2, 1, 0, 4),
                      Contains("'choice' must be i32"));
  REQUIRE_THROWS_WITH(ops().moe_route_backward(ib, fb, fb, ib, fb, fb, 1, 2, 4, 2, 0.1f),
                      Contains("moe_route_backward"));
  const IVec far = {0, 9};
  REQUIRE_THROWS_WITH(ops().moe_scatter(fb, none(), fb, none(), buf(far), none(), 1, 2, 4, 2),
                      Contains("moe_scatter: slot 9 beyond the 4 rows"));
  REQUIRE_THROWS_WITH(ops().moe_combine(fb, ib, ib, none(), 1, 2, 2), Contains("moe_combine"));
}
