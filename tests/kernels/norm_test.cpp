// layernorm and rmsnorm: forward (outputs and saved stats) against double references, backward
// against the closed form and finite differences; d_in accumulates, parameter grads accumulate.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;

namespace {

struct NormRef {
  DVec out, mean, rstd;
};

NormRef naive_layernorm(const Vec& x, const Vec& w, const Vec* b, int N, int C, double eps) {
  NormRef r{DVec(N * C), DVec(N), DVec(N)};
  for (int n = 0; n < N; ++n) {
    double mu = 0.0;
    for (int c = 0; c < C; ++c) mu += x[n * C + c];
    mu /= C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu);
    var /= C;
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c) r.out[n * C + c] = (x[n * C + c] - mu) * rs * w[c] + (b ? (*b)[c] : 0.0);
    r.mean[n] = mu;
    r.rstd[n] = rs;
  }
  return r;
}

NormRef naive_rmsnorm(const Vec& x, const Vec& w, int N, int C, double eps) {
  NormRef r{DVec(N * C), DVec(N), DVec(N)};
  for (int n = 0; n < N; ++n) {
    double ms = 0.0;
    for (int c = 0; c < C; ++c) ms += double(x[n * C + c]) * x[n * C + c];
    const double rs = 1.0 / std::sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) r.out[n * C + c] = x[n * C + c] * rs * w[c];
    r.rstd[n] = rs;
  }
  return r;
}

}  // namespace

TEST_CASE("layernorm_forward matches the naive reference", "[layernorm]") {
  for (const auto& [N, C] : {std::pair{7, 13}, std::pair{70, 13}, std::pair{3, 1}, std::pair{40, 768}}) {
    INFO("N=" << N << " C=" << C);
    const Vec x = random_vec(N * C, 1, -2.0f, 3.0f);
    const Vec w = random_vec(C, 2, 0.5f, 1.5f);
    const Vec b = random_vec(C, 3);
    Vec out = nan_vec(N * C), mean = nan_vec(N), rstd = nan_vec(N);
    ops().layernorm_forward(buf(out), buf(mean), buf(rstd), buf(x), buf(w), buf(b), N, C, 1e-5f);
    const NormRef ref = naive_layernorm(x, w, &b, N, C, 1e-5);
    check_close(out, ref.out, 1e-5, 1e-5, "out");
    check_close(mean, ref.mean, 1e-6, 1e-6, "mean");
    check_close(rstd, ref.rstd, 1e-5, 1e-5, "rstd");
    out = nan_vec(N * C);
    ops().layernorm_forward(buf(out), none(), none(), buf(x), buf(w), none(), N, C, 1e-5f);
    check_close(out, naive_layernorm(x, w, nullptr, N, C, 1e-5).out, 1e-5, 1e-5,
                "out without bias and stats");
  }
}

TEST_CASE("layernorm_backward: closed form, finite differences, accumulation", "[layernorm][grad]") {
  const int N = 37, C = 13;  // two row blocks, the second partial
  Vec x = random_vec(N * C, 11, -2.0f, 2.0f);
  Vec w = random_vec(C, 12, 0.5f, 1.5f);
  Vec b = random_vec(C, 13);
  const Vec r = random_vec(N * C, 14);
  const float eps = 1e-5f;
  Vec out(N * C), mean(N), rstd(N);
  ops().layernorm_forward(buf(out), buf(mean), buf(rstd), buf(x), buf(w), buf(b), N, C, eps);

  // Closed form in double.
  const NormRef ref = naive_layernorm(x, w, &b, N, C, eps);
  DVec ref_dx(N * C), ref_dw(C, 0.0), ref_db(C, 0.0);
  for (int n = 0; n < N; ++n) {
    double mg = 0.0, mgx = 0.0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - ref.mean[n]) * ref.rstd[n];
      const double g = double(r[n * C + c]) * w[c];
      mg += g / C;
      mgx += g * xhat / C;
      ref_dw[c] += r[n * C + c] * xhat;
      ref_db[c] += r[n * C + c];
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - ref.mean[n]) * ref.rstd[n];
      ref_dx[n * C + c] = ref.rstd[n] * (double(r[n * C + c]) * w[c] - mg - xhat * mgx);
    }
  }
  const Vec prior = random_vec(N * C, 15);  // d_in accumulates onto what is there
  Vec dx = prior, dw(C, 0.0f), db(C, 0.0f);
  ops().layernorm_backward(buf(dx), buf(dw), buf(db), buf(r), buf(x), buf(w), buf(mean), buf(rstd), N, C);
  DVec ref_dx_acc(N * C);
  for (int i = 0; i < N * C; ++i) ref_dx_acc[i] = ref_dx[i] + prior[i];
  check_close(dx, ref_dx_acc, 1e-5, 1e-5, "d_in (accumulated onto prior)");
  check_close(dw, ref_dw, 1e-5, 1e-5, "d_weight");
  check_close(db, ref_db, 1e-5, 1e-5, "d_bias");

  auto loss = [&] {
    Vec o(N * C), mu(N), rs(N);
    ops().layernorm_forward(buf(o), buf(mu), buf(rs), buf(x), buf(w), buf(b), N, C, eps);
    return weighted_sum(o, r);
  };
  Vec dx0(N * C, 0.0f);
  ops().layernorm_backward(buf(dx0), none(), none(), buf(r), buf(x), buf(w), buf(mean), buf(rstd), N, C);
  check_grad("d_in", x, dx0, loss);
  check_grad("d_weight", w, dw, loss);
  check_grad("d_bias", b, db, loss);

  const Vec dw1 = dw, db1 = db;
  ops().layernorm_backward(none(), buf(dw), buf(db), buf(r), buf(x), buf(w), buf(mean), buf(rstd), N, C);
  check_close(dw, times(dw1, 2.0f), 0.0, 0.0, "d_weight accumulated");
  check_close(db, times(db1, 2.0f), 0.0, 0.0, "d_bias accumulated");
}

TEST_CASE("rmsnorm_forward matches the naive reference", "[rmsnorm]") {
  for (const auto& [N, C] : {std::pair{7, 13}, std::pair{70, 13}, std::pair{40, 512}}) {
    INFO("N=" << N << " C=" << C);
    const Vec x = random_vec(N * C, 21, -2.0f, 3.0f);
    const Vec w = random_vec(C, 22, 0.5f, 1.5f);
    Vec out = nan_vec(N * C), rstd = nan_vec(N);
    ops().rmsnorm_forward(buf(out), buf(rstd), buf(x), buf(w), N, C, 1e-6f);
    const NormRef ref = naive_rmsnorm(x, w, N, C, 1e-6);
    check_close(out, ref.out, 1e-5, 1e-5, "out");
    check_close(rstd, ref.rstd, 1e-5, 1e-5, "rstd");
  }
}

TEST_CASE("rmsnorm_backward: closed form, finite differences, accumulation", "[rmsnorm][grad]") {
  const int N = 37, C = 13;
  Vec x = random_vec(N * C, 31, -2.0f, 2.0f);
  Vec w = random_vec(C, 32, 0.5f, 1.5f);
  const Vec r = random_vec(N * C, 33);
  const float eps = 1e-5f;
  Vec out(N * C), rstd(N);
  ops().rmsnorm_forward(buf(out), buf(rstd), buf(x), buf(w), N, C, eps);
  const NormRef ref = naive_rmsnorm(x, w, N, C, eps);
  DVec ref_dx(N * C), ref_dw(C, 0.0);
  for (int n = 0; n < N; ++n) {
    double mgx = 0.0;
    for (int c = 0; c < C; ++c) {
      const double xhat = x[n * C + c] * ref.rstd[n];
      mgx += double(r[n * C + c]) * w[c] * xhat / C;
      ref_dw[c] += r[n * C + c] * xhat;
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = x[n * C + c] * ref.rstd[n];
      ref_dx[n * C + c] = ref.rstd[n] * (double(r[n * C + c]) * w[c] - xhat * mgx);
    }
  }
  const Vec prior = random_vec(N * C, 34);
  Vec dx = prior, dw(C, 0.0f);
  ops().rmsnorm_backward(buf(dx), buf(dw), buf(r), buf(x), buf(w), buf(rstd), N, C);
  DVec ref_dx_acc(N * C);
  for (int i = 0; i < N * C; ++i) ref_dx_acc[i] = ref_dx[i] + prior[i];
  check_close(dx, ref_dx_acc, 1e-5, 1e-5, "d_in (accumulated onto prior)");
  check_close(dw, ref_dw, 1e-5, 1e-5, "d_weight");

  auto loss = [&] {
    Vec o(N * C), rs(N);
    ops().rmsnorm_forward(buf(o), buf(rs), buf(x), buf(w), N, C, eps);
    return weighted_sum(o, r);
  };
  Vec dx0(N * C, 0.0f);
  ops().rmsnorm_backward(buf(dx0), none(), buf(r), buf(x), buf(w), buf(rstd), N, C);
  check_grad("d_in", x, dx0, loss);
  check_grad("d_weight", w, dw, loss);

  const Vec dw1 = dw;
  ops().rmsnorm_backward(none(), buf(dw), buf(r), buf(x), buf(w), buf(rstd), N, C);
  check_close(dw, times(dw1, 2.0f), 0.0, 0.0, "d_weight accumulated");
}
