// cross_entropy_forward_backward: losses and d_logits against a double log-softmax, padded vocab
// (NaN in the padding must not leak), ignored targets, aliasing, stability, finite differences.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;

namespace {

struct CeRef {
  DVec losses, d_logits;
};

CeRef naive_ce(const Vec& logits, const IVec& targets, int N, int V, int Vp, double grad_scale) {
  CeRef r{DVec(N, 0.0), DVec(std::size_t(N) * Vp, 0.0)};
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    const float* x = logits.data() + std::size_t(n) * Vp;
    double mx = -1e300;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(x[v]));
    double sum = 0.0;
    for (int v = 0; v < V; ++v) sum += std::exp(x[v] - mx);
    r.losses[n] = std::log(sum) + mx - x[targets[n]];
    for (int v = 0; v < V; ++v) {
      r.d_logits[std::size_t(n) * Vp + v] =
          grad_scale * (std::exp(x[v] - mx) / sum - (v == targets[n] ? 1.0 : 0.0));
    }
  }
  return r;
}

Vec padded_logits(int N, int V, int Vp, std::uint32_t seed, float lo, float hi) {
  Vec x = random_vec(std::size_t(N) * Vp, seed, lo, hi);
  for (int n = 0; n < N; ++n) {
    for (int v = V; v < Vp; ++v) x[std::size_t(n) * Vp + v] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

}  // namespace

TEST_CASE("cross-entropy with padded vocab and ignored targets", "[cross_entropy]") {
  const int N = 7, V = 13, Vp = 16;
  const float grad_scale = 1.0f / 5.0f;
  const Vec logits = padded_logits(N, V, Vp, 1, -4.0f, 4.0f);
  const IVec targets{3, -1, 12, 0, -100, 7, 7};
  const CeRef ref = naive_ce(logits, targets, N, V, Vp, grad_scale);
  Vec losses = nan_vec(N), dl = nan_vec(N * Vp);
  ops().cross_entropy_forward_backward(buf(losses), buf(dl), buf(logits), buf(targets), N, V, Vp, grad_scale);
  check_close(losses, ref.losses, 1e-6, 1e-6, "losses");
  check_close(dl, ref.d_logits, 1e-7, 1e-5, "d_logits (padding and ignored rows zero)");

  // d_logits aliasing logits.
  Vec inplace = logits;
  Vec losses2 = nan_vec(N);
  ops().cross_entropy_forward_backward(buf(losses2), buf(inplace), buf(inplace), buf(targets), N, V, Vp,
                                       grad_scale);
  check_close(losses2, losses, 0.0, 0.0, "losses (aliased)");
  check_close(inplace, dl, 0.0, 0.0, "d_logits (aliased)");

  // Loss only.
  Vec losses3 = nan_vec(N);
  ops().cross_entropy_forward_backward(buf(losses3), none(), buf(logits), buf(targets), N, V, Vp, grad_scale);
  check_close(losses3, losses, 0.0, 0.0, "losses (no d_logits)");
}

TEST_CASE("cross-entropy is stable for large logits and a large vocab", "[cross_entropy]") {
  const int N = 5, V = 50257, Vp = 50304;
  Vec logits = padded_logits(N, V, Vp, 2, -10.0f, 10.0f);
  for (int v = 0; v < V; ++v) logits[v] += 1000.0f;  // row 0 shifted: exp would overflow naively
  logits[std::size_t(2) * Vp + 17] = 80.0f;          // row 2 dominated by one logit
  const IVec targets{5, 50256, 17, -1, 0};
  const CeRef ref = naive_ce(logits, targets, N, V, Vp, 1.0);
  Vec losses = nan_vec(N), dl = nan_vec(std::size_t(N) * Vp);
  ops().cross_entropy_forward_backward(buf(losses), buf(dl), buf(logits), buf(targets), N, V, Vp, 1.0f);
  check_close(losses, ref.losses, 1e-4, 1e-5, "losses");
  check_close(dl, ref.d_logits, 1e-7, 1e-4, "d_logits");
}

TEST_CASE("cross-entropy gradient passes finite differences", "[cross_entropy][grad]") {
  const int N = 6, V = 11, Vp = 12;
  const float grad_scale = 0.25f;
  Vec logits = padded_logits(N, V, Vp, 3, -3.0f, 3.0f);
  for (int n = 0; n < N; ++n) logits[std::size_t(n) * Vp + V] = 0.5f;  // finite padding for the FD sweep
  const IVec targets{1, 10, -1, 4, 0, 9};
  Vec losses(N), dl = nan_vec(N * Vp);
  ops().cross_entropy_forward_backward(buf(losses), buf(dl), buf(logits), buf(targets), N, V, Vp, grad_scale);
  check_grad("d_logits", logits, dl, [&] {
    Vec l(N);
    ops().cross_entropy_forward_backward(buf(l), none(), buf(logits), buf(targets), N, V, Vp, grad_scale);
    double s = 0.0;
    for (float x : l) s += double(x) * grad_scale;
    return s;
  });
}

TEST_CASE("cross-entropy rejects a target beyond the real vocab", "[cross_entropy][errors]") {
  const Vec logits = random_vec(2 * 8, 4);
  const IVec targets{1, 6};  // V = 6: 6 is a padding column
  Vec losses(2);
  REQUIRE_THROWS_AS(
      ops().cross_entropy_forward_backward(buf(losses), none(), buf(logits), buf(targets), 2, 6, 8, 1.0f),
      std::invalid_argument);
}

namespace {

// The vocab-parallel passes over `shards` column slices of `logits` [N, shards*Vs], with the stats
// all-gathered by hand as the engine's tp group does: losses (every shard's, which must agree) and
// the shards' d_logits put back side by side.
struct ShardedCe {
  Vec losses, d_logits;
};

ShardedCe sharded_ce(const Vec& logits, const IVec& targets, int N, int V, int Vs, int shards,
                     float grad_scale) {
  const std::size_t width = std::size_t(shards) * Vs;
  std::vector<Vec> slices(shards, Vec(std::size_t(N) * Vs));
  for (int r = 0; r < shards; ++r) {
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < Vs; ++v)
        slices[r][std::size_t(n) * Vs + v] = logits[n * width + std::size_t(r) * Vs + v];
    }
  }
  Vec all_stats = nan_vec(std::size_t(shards) * N * 3);
  for (int r = 0; r < shards; ++r) {
    Vec stats = nan_vec(std::size_t(N) * 3);
    ops().cross_entropy_shard_stats(buf(stats), buf(slices[r]), buf(targets), N, V, Vs, r);
    std::copy(stats.begin(), stats.end(), all_stats.begin() + std::ptrdiff_t(r) * N * 3);
  }
  ShardedCe out{nan_vec(N), nan_vec(N * width)};
  for (int r = 0; r < shards; ++r) {
    Vec losses = nan_vec(N);
    ops().cross_entropy_shard_forward_backward(buf(losses), buf(slices[r]), buf(slices[r]), buf(all_stats),
                                               buf(targets), N, V, Vs, r, shards, grad_scale);
    if (r == 0) out.losses = losses;
    for (int n = 0; n < N; ++n)  // every shard computes the same losses (NaN too)
      CHECK((std::isnan(losses[n]) ? std::isnan(out.losses[n]) : losses[n] == out.losses[n]));
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < Vs; ++v)
        out.d_logits[n * width + std::size_t(r) * Vs + v] = slices[r][std::size_t(n) * Vs + v];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("vocab-parallel cross-entropy matches the whole-row op over any shard count",
          "[cross_entropy][tp]") {
  const float grad_scale = 0.25f;
  // V = 13 over Vs-column shards: 2 x 8 (3 padding columns), 4 x 4, 7 x 2 (the last shard all padding).
  for (const auto& [Vs, shards] : {std::pair{8, 2}, std::pair{4, 4}, std::pair{2, 7}, std::pair{16, 1}}) {
    const int N = 9, V = 13, Vp = Vs * shards;
    const Vec logits = padded_logits(N, V, Vp, 7, -6.0f, 6.0f);
    const IVec targets{0, 12, -1, 5, 7, 8, 3, -100, 11};
    const CeRef ref = naive_ce(logits, targets, N, V, Vp, grad_scale);
    const ShardedCe got = sharded_ce(logits, targets, N, V, Vs, shards, grad_scale);
    check_close(got.losses, ref.losses, 1e-6, 1e-6, "losses");
    check_close(got.d_logits, ref.d_logits, 1e-7, 1e-5, "d_logits (padding and ignored rows zero)");
  }
}

TEST_CASE("vocab-parallel cross-entropy: loss only, and a target >= V is rejected",
          "[cross_entropy][tp][errors]") {
  const int N = 2, V = 5, Vs = 3;
  const Vec logits = random_vec(std::size_t(N) * Vs, 3);
  const IVec targets{1, 4};
  Vec stats(std::size_t(N) * 3), all_stats(std::size_t(N) * 6, 0.0f), losses(N);
  ops().cross_entropy_shard_stats(buf(stats), buf(logits), buf(targets), N, V, Vs, 1);
  CHECK(stats[2] == 0.0f);           // row 0's target (1) is on shard 0
  CHECK(stats[5] == logits[3 + 1]);  // row 1's target (4) is shard 1's column 1
  std::copy(stats.begin(), stats.end(), all_stats.begin() + N * 3);
  ops().cross_entropy_shard_stats(buf(stats), buf(logits), buf(targets), N, V, Vs, 0);
  std::copy(stats.begin(), stats.end(), all_stats.begin());
  ops().cross_entropy_shard_forward_backward(buf(losses), none(), buf(logits), buf(all_stats), buf(targets),
                                             N, V, Vs, 0, 2, 1.0f);
  CHECK(std::isfinite(losses[0]));
  const IVec bad{1, 5};
  REQUIRE_THROWS_AS(ops().cross_entropy_shard_stats(buf(stats), buf(logits), buf(bad), N, V, Vs, 0),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(ops().cross_entropy_shard_forward_backward(
                        buf(losses), none(), buf(logits), buf(all_stats), buf(targets), N, V, 2, 0, 2, 1.0f),
                    std::invalid_argument);  // 2 shards of 2 columns do not cover V = 5
}

TEST_CASE("vocab-parallel cross-entropy: a NaN logit in any shard makes the loss NaN, as the whole row does",
          "[cross_entropy][tp]") {
  const int N = 1, V = 8, Vs = 4, shards = 2;
  for (const int bad_column : {1, 6}) {
    Vec logits = random_vec(8, 5);
    logits[bad_column] = std::numeric_limits<float>::quiet_NaN();
    const IVec targets{2};
    const ShardedCe got = sharded_ce(logits, targets, N, V, Vs, shards, 1.0f);
    CHECK(std::isnan(got.losses[0]));
  }
}
