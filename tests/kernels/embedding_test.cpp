// embedding_forward / embedding_backward: gathers, scatter-adds with repeated tokens, finite
// differences, accumulation, and rejection of negative ids.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;

TEST_CASE("embedding_forward gathers rows and adds positions", "[embedding]") {
  const int B = 2, T = 5, C = 13, V = 11;
  const int N = B * T;
  const IVec tokens = random_ints(N, 1, 0, V - 1);
  const Vec table = random_vec(V * C, 2);
  const Vec pos = random_vec(T * C, 3);
  Vec out = nan_vec(N * C);
  ops().embedding_forward(buf(out), buf(tokens), buf(table), buf(pos), N, T, C);
  DVec ref(N * C);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) ref[n * C + c] = double(table[tokens[n] * C + c]) + pos[(n % T) * C + c];
  }
  check_close(out, ref, 1e-6, 1e-6, "out with positions");

  out = nan_vec(N * C);
  ops().embedding_forward(buf(out), buf(tokens), buf(table), none(), N, T, C);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) ref[n * C + c] = table[tokens[n] * C + c];
  }
  check_close(out, ref, 0.0, 0.0, "out without positions");
}

TEST_CASE("embedding_backward scatter-adds, accumulates, and passes finite differences",
          "[embedding][grad]") {
  const int B = 3, T = 4, C = 70, V = 5;  // few ids: every id repeats; C spans two column chunks
  const int N = B * T;
  const IVec tokens = random_ints(N, 11, 0, V - 1);
  Vec table = random_vec(V * C, 12);
  Vec pos = random_vec(T * C, 13);
  const Vec r = random_vec(N * C, 14);
  DVec ref_dt(V * C, 0.0), ref_dp(T * C, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      ref_dt[tokens[n] * C + c] += r[n * C + c];
      ref_dp[(n % T) * C + c] += r[n * C + c];
    }
  }
  Vec dt(V * C, 0.0f), dp(T * C, 0.0f);
  ops().embedding_backward(buf(dt), buf(dp), buf(r), buf(tokens), N, T, C);
  check_close(dt, ref_dt, 1e-6, 1e-6, "d_table");
  check_close(dp, ref_dp, 1e-6, 1e-6, "d_positions");

  auto loss = [&] {
    Vec out(N * C);
    ops().embedding_forward(buf(out), buf(tokens), buf(table), buf(pos), N, T, C);
    return weighted_sum(out, r);
  };
  check_grad("d_table", table, dt, loss);
  check_grad("d_positions", pos, dp, loss);

  const Vec dt1 = dt, dp1 = dp;
  ops().embedding_backward(buf(dt), buf(dp), buf(r), buf(tokens), N, T, C);
  check_close(dt, times(dt1, 2.0f), 1e-6, 1e-6, "d_table accumulated");
  check_close(dp, times(dp1, 2.0f), 1e-6, 1e-6, "d_positions accumulated");
}

TEST_CASE("embedding rejects negative token ids", "[embedding][errors]") {
  const IVec tokens{0, -3};
  const Vec table = random_vec(8, 1);
  Vec out(8);
  REQUIRE_THROWS_AS(ops().embedding_forward(buf(out), buf(tokens), buf(table), none(), 2, 2, 4),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(ops().embedding_backward(buf(out), none(), buf(table), buf(tokens), 2, 2, 4),
                    std::invalid_argument);
}

TEST_CASE("embedding: kRowElsewhere adds no table row (vocab-parallel)", "[embedding][tp]") {
  const int N = 3, T = 3, C = 2;
  const IVec tokens{1, ptrain::kernels::kRowElsewhere, 0};
  const Vec table{1, 2, 3, 4}, positions{10, 20, 30, 40, 50, 60};
  Vec out = nan_vec(N * C);
  ops().embedding_forward(buf(out), buf(tokens), buf(table), buf(positions), N, T, C);
  check_close(out, Vec{13, 24, 30, 40, 51, 62}, 0.0, 0.0, "with positions");
  ops().embedding_forward(buf(out), buf(tokens), buf(table), none(), N, T, C);
  check_close(out, Vec{3, 4, 0, 0, 1, 2}, 0.0, 0.0, "without positions");
  Vec d_table(4, 0.0f), d_positions(6, 0.0f);
  const Vec d_out{1, 1, 5, 5, 2, 2};
  ops().embedding_backward(buf(d_table), buf(d_positions), buf(d_out), buf(tokens), N, T, C);
  check_close(d_table, Vec{2, 2, 1, 1}, 0.0, 0.0, "d_table skips the row held elsewhere");
  check_close(d_positions, d_out, 0.0, 0.0, "d_positions takes every row");
}
