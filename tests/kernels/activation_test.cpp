// GELU (HF gelu_new, tanh approximation) and SwiGLU against their formulas in double, their exact
// derivatives, finite differences, saturation at large |x|, and element-for-element aliasing.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;

namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
}

double sigmoid_ref(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Random values plus the edges: large magnitudes where tanh/exp saturate, and tiny ones.
Vec activation_inputs(std::size_t n, std::uint32_t seed) {
  Vec x = random_vec(n, seed, -6.0f, 6.0f);
  const float edges[] = {-100.0f, -30.0f, -10.0f, -1e-3f, 1e-6f, 0.5f, 10.0f, 30.0f, 100.0f};
  std::copy(std::begin(edges), std::end(edges), x.begin());
  return x;
}

}  // namespace

TEST_CASE("gelu_forward / gelu_backward match HF gelu_new and its derivative", "[activations]") {
  for (const std::size_t n : {std::size_t{37}, std::size_t{100003}}) {  // serial and parallel paths
    INFO("n=" << n);
    const Vec x = activation_inputs(n, 1);
    const Vec dy = random_vec(n, 2);
    DVec ref_y(n), ref_dx(n);
    for (std::size_t i = 0; i < n; ++i) {
      ref_y[i] = gelu_ref(x[i]);
      ref_dx[i] = dy[i] * gelu_grad_ref(x[i]);
    }
    Vec y = nan_vec(n), dx = nan_vec(n);
    ops().gelu_forward(buf(y), buf(x), static_cast<std::int64_t>(n));
    ops().gelu_backward(buf(dx), buf(dy), buf(x), static_cast<std::int64_t>(n));
    check_close(y, ref_y, 1e-6, 1e-5, "gelu");
    check_close(dx, ref_dx, 1e-6, 1e-5, "gelu d_in");

    Vec inplace = x;  // out == in
    ops().gelu_forward(buf(inplace), buf(inplace), static_cast<std::int64_t>(n));
    check_close(inplace, y, 0.0, 0.0, "gelu in place");
  }
}

TEST_CASE("gelu_backward passes finite differences", "[activations][grad]") {
  const int n = 41;
  Vec x = random_vec(n, 11, -4.0f, 4.0f);
  const Vec r = random_vec(n, 12);
  Vec dx = nan_vec(n);
  ops().gelu_backward(buf(dx), buf(r), buf(x), n);
  check_grad("gelu d_in", x, dx, [&] {
    Vec y(n);
    ops().gelu_forward(buf(y), buf(x), n);
    return weighted_sum(y, r);
  });
}

TEST_CASE("swiglu_forward / swiglu_backward match silu(gate) * up", "[activations]") {
  for (const std::size_t n : {std::size_t{37}, std::size_t{100003}}) {
    INFO("n=" << n);
    const Vec g = activation_inputs(n, 21);
    const Vec u = random_vec(n, 22, -2.0f, 2.0f);
    const Vec dy = random_vec(n, 23);
    DVec ref_y(n), ref_dg(n), ref_du(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double s = sigmoid_ref(g[i]);
      ref_y[i] = g[i] * s * u[i];
      ref_dg[i] = dy[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
      ref_du[i] = dy[i] * g[i] * s;
    }
    Vec y = nan_vec(n), dg = nan_vec(n), du = nan_vec(n);
    ops().swiglu_forward(buf(y), buf(g), buf(u), static_cast<std::int64_t>(n));
    ops().swiglu_backward(buf(dg), buf(du), buf(dy), buf(g), buf(u), static_cast<std::int64_t>(n));
    check_close(y, ref_y, 1e-6, 1e-5, "swiglu");
    check_close(dg, ref_dg, 1e-6, 1e-5, "d_gate");
    check_close(du, ref_du, 1e-6, 1e-5, "d_up");
  }
}

TEST_CASE("swiglu_backward passes finite differences", "[activations][grad]") {
  const int n = 41;
  Vec g = random_vec(n, 31, -4.0f, 4.0f);
  Vec u = random_vec(n, 32, -2.0f, 2.0f);
  const Vec r = random_vec(n, 33);
  Vec dg = nan_vec(n), du = nan_vec(n);
  ops().swiglu_backward(buf(dg), buf(du), buf(r), buf(g), buf(u), n);
  auto loss = [&] {
    Vec y(n);
    ops().swiglu_forward(buf(y), buf(g), buf(u), n);
    return weighted_sum(y, r);
  };
  check_grad("d_gate", g, dg, loss);
  check_grad("d_up", u, du, loss);
}
