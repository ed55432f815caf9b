// linear_forward / linear_backward against triple loops in double, finite differences, and the
// accumulate (d_weight, d_bias) / overwrite (d_in) contract.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;

namespace {

// out[m,n] = sum_k in[m,k] w[n,k] + b[n]
DVec naive_linear(const Vec& in, const Vec& w, const Vec* b, int M, int N, int K) {
  DVec out(static_cast<std::size_t>(M) * N);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = b ? (*b)[n] : 0.0;
      for (int k = 0; k < K; ++k) s += static_cast<double>(in[m * K + k]) * w[n * K + k];
      out[m * N + n] = s;
    }
  }
  return out;
}

struct LinearCase {
  int M, N, K;
  bool bias;
};

}  // namespace

TEST_CASE("linear_forward matches the naive reference", "[linear]") {
  for (const LinearCase c :
       {LinearCase{7, 13, 5, true}, LinearCase{7, 13, 5, false}, LinearCase{1, 1, 1, true},
        LinearCase{67, 96, 80, true}, LinearCase{130, 33, 257, false}}) {
    INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " bias=" << c.bias);
    const Vec in = random_vec(c.M * c.K, 1);
    const Vec w = random_vec(c.N * c.K, 2);
    const Vec b = random_vec(c.N, 3);
    Vec out = nan_vec(c.M * c.N);
    ops().linear_forward(buf(out), buf(in), buf(w), c.bias ? buf(b) : none(), c.M, c.N, c.K);
    check_close(out, naive_linear(in, w, c.bias ? &b : nullptr, c.M, c.N, c.K), 1e-5, 1e-5, "out");
  }
}

TEST_CASE("linear_backward matches the naive reference and accumulates parameter grads", "[linear]") {
  const int M = 7, N = 13, K = 5;
  const Vec in = random_vec(M * K, 11);
  const Vec w = random_vec(N * K, 12);
  const Vec dy = random_vec(M * N, 13);
  DVec ref_din(M * K, 0.0), ref_dw(N * K, 0.0), ref_db(N, 0.0);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const double g = dy[m * N + n];
      ref_db[n] += g;
      for (int k = 0; k < K; ++k) {
        ref_din[m * K + k] += g * w[n * K + k];
        ref_dw[n * K + k] += g * in[m * K + k];
      }
    }
  }
  Vec din = nan_vec(M * K);  // overwritten
  Vec dw(N * K, 0.0f), db(N, 0.0f);
  ops().linear_backward(buf(din), buf(dw), buf(db), buf(dy), buf(in), buf(w), M, N, K);
  check_close(din, ref_din, 1e-5, 1e-5, "d_in");
  check_close(dw, ref_dw, 1e-5, 1e-5, "d_weight");
  check_close(db, ref_db, 1e-5, 1e-5, "d_bias");

  // A second call: d_in is overwritten (same value), d_weight and d_bias double.
  const Vec din_first = din;
  const Vec dw_first = dw;
  const Vec db_first = db;
  ops().linear_backward(buf(din), buf(dw), buf(db), buf(dy), buf(in), buf(w), M, N, K);
  check_close(din, din_first, 0.0, 0.0, "d_in overwritten");
  check_close(dw, times(dw_first, 2.0f), 1e-6, 1e-6, "d_weight accumulated");
  check_close(db, times(db_first, 2.0f), 1e-6, 1e-6, "d_bias accumulated");

  // Optional outputs may be null.
  Vec dw2(N * K, 0.0f);
  ops().linear_backward(none(), buf(dw2), none(), buf(dy), buf(in), buf(w), M, N, K);
  check_close(dw2, dw_first, 0.0, 0.0, "d_weight alone");
}

TEST_CASE("linear_backward passes finite differences", "[linear][grad]") {
  const int M = 5, N = 7, K = 6;
  Vec in = random_vec(M * K, 21);
  Vec w = random_vec(N * K, 22);
  Vec b = random_vec(N, 23);
  const Vec r = random_vec(M * N, 24);
  auto loss = [&] {
    Vec out(M * N);
    ops().linear_forward(buf(out), buf(in), buf(w), buf(b), M, N, K);
    return weighted_sum(out, r);
  };
  Vec din = nan_vec(M * K), dw(N * K, 0.0f), db(N, 0.0f);
  ops().linear_backward(buf(din), buf(dw), buf(db), buf(r), buf(in), buf(w), M, N, K);
  check_grad("d_in", in, din, loss);
  check_grad("d_weight", w, dw, loss);
  check_grad("d_bias", b, db, loss);
}

TEST_CASE("linear with a large shape uses several threads and still matches", "[linear]") {
  const int M = 256, N = 192, K = 320;
  const Vec in = random_vec(M * K, 31);
  const Vec w = random_vec(N * K, 32);
  const Vec b = random_vec(N, 33);
  const Vec dy = random_vec(M * N, 34);
  Vec out = nan_vec(M * N);
  ops().linear_forward(buf(out), buf(in), buf(w), buf(b), M, N, K);
  check_close(out, naive_linear(in, w, &b, M, N, K), 1e-4, 1e-5, "out");
  Vec db(N, 0.5f);
  ops().linear_backward(none(), none(), buf(db), buf(dy), buf(in), buf(w), M, N, K);
  DVec ref_db(N, 0.5);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) ref_db[n] += dy[m * N + n];
  }
  check_close(db, ref_db, 1e-5, 1e-5, "d_bias");
}

TEST_CASE("linear_input_grad_add adds d_out @ weight to d_in, rounded once in BF16", "[linear]") {
  const int M = 9, N = 14, K = 11;
  const Vec w = random_vec(N * K, 41);
  const Vec dy = random_vec(M * N, 42);
  const Vec d_in0 = random_vec(M * K, 43);
  Vec product = nan_vec(M * K);
  ops().linear_backward(buf(product), none(), none(), buf(dy), none(), buf(w), M, N, K);
  for (const ptrain::kernels::DType t : {F32, BF16}) {
    INFO("d_in " << to_string(t));
    const Vec start = as_dtype(d_in0, t);
    HostTensor d_in(start, t), w_t(w, t), dy_t(dy, t);
    ops().linear_input_grad_add(d_in.buf(), dy_t.buf(), w_t.buf(), M, N, K);
    // The product of the stored operands in fp32, added to d_in's stored values, rounded once.
    Vec stored_product = nan_vec(M * K);
    ops().linear_backward(buf(stored_product), none(), none(), buf(as_dtype(dy, t)), none(), buf(as_dtype(w, t)), M,
                          N, K);
    DVec want(static_cast<std::size_t>(M) * K);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(start[i]) + stored_product[i];
    check_close(d_in.values(), want, t == BF16 ? 1e-2 : 1e-5, t == BF16 ? 8e-3 : 1e-5, "d_in");
  }
  // F32: exactly what linear_backward into a temporary and an accumulate make, up to the GEMM's sum.
  Vec d_in = d_in0;
  ops().linear_input_grad_add(buf(d_in), buf(dy), buf(w), M, N, K);
  Vec summed = d_in0;
  ops().accumulate(buf(summed), buf(product), M * K);
  check_close(d_in, to_double(summed), 1e-6, 1e-6, "d_in against the two ops");
  // Empty sums leave d_in; a missing d_in is refused.
  Vec untouched = d_in0;
  ops().linear_input_grad_add(buf(untouched), buf(dy), buf(w), M, 0, K);
  check_close(untouched, to_double(d_in0), 0.0, 0.0, "N == 0");
  CHECK_THROWS_WITH(ops().linear_input_grad_add(none(), buf(dy), buf(w), M, N, K),
                    Catch::Contains("linear_input_grad_add") && Catch::Contains("d_in"));
}
