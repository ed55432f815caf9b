// adamw_step against a hand-computed step (bias correction, decoupled decay) and a double
// reference over several steps; its gradient scale and working copy against the separate passes
// (scale, then AdamW, then convert) they replace, bit for bit.
#include <cstring>

#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using ptrain::kernels::Buf;
using ptrain::kernels::DType;

TEST_CASE("adamw_step matches a step computed by hand", "[adamw]") {
  // p = 1, g = 0.5, lr = 0.1, betas (0.9, 0.999), eps = 1e-8, wd = 0.01.
  // Step 1: m = 0.05, v = 0.00025; m^ = 0.05 / 0.1 = 0.5, v^ = 0.00025 / 0.001 = 0.25;
  //   p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1) = 0.899000000199...
  Vec p{1.0f}, g{0.5f}, m{0.0f}, v{0.0f};
  ops().adamw_step(buf(p), buf(g), buf(m), buf(v), Buf{}, 1, {0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1.0f});
  CHECK(m[0] == Approx(0.05).epsilon(1e-6));
  CHECK(v[0] == Approx(0.00025).epsilon(1e-4));  // 1 - 0.999f is 1.00005e-3
  CHECK(p[0] == Approx(0.8990000002).epsilon(1e-6));
  // Step 2 with g = -0.25: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225;
  //   m^ = 0.02 / 0.19, v^ = 0.00031225 / 0.001999; p -= 0.1 (m^ / (sqrt v^ + eps) + 0.01 p).
  g[0] = -0.25f;
  const double p1 = p[0];
  ops().adamw_step(buf(p), buf(g), buf(m), buf(v), Buf{}, 1, {0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2, 1.0f});
  const double mhat = 0.02 / 0.19, vhat = 0.00031225 / 0.001999;
  CHECK(m[0] == Approx(0.02).epsilon(1e-5));
  CHECK(v[0] == Approx(0.00031225).epsilon(1e-4));
  CHECK(p[0] == Approx(p1 - 0.1 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.01 * p1)).epsilon(1e-6));
}

TEST_CASE("adamw_step follows the double reference over several steps", "[adamw]") {
  for (const std::size_t n : {std::size_t{13}, std::size_t{100003}}) {
    INFO("n=" << n);
    Vec p = random_vec(n, 1), m(n, 0.0f), v(n, 0.0f);
    DVec rp = to_double(p), rm(n, 0.0), rv(n, 0.0);
    const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int step = 1; step <= 4; ++step) {
      const Vec g = random_vec(n, 100 + step);
      ops().adamw_step(buf(p), buf(g), buf(m), buf(v), Buf{}, static_cast<std::int64_t>(n),
                       {float(lr), float(b1), float(b2), float(eps), float(wd), step, 1.0f});
      for (std::size_t i = 0; i < n; ++i) {
        rm[i] = b1 * rm[i] + (1 - b1) * g[i];
        rv[i] = b2 * rv[i] + (1 - b2) * double(g[i]) * g[i];
        const double mhat = rm[i] / (1 - std::pow(b1, step));
        const double vhat = rv[i] / (1 - std::pow(b2, step));
        rp[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * rp[i]);
      }
    }
    check_close(p, rp, 1e-6, 1e-5, "param");
    check_close(m, rm, 1e-7, 1e-5, "m");
    check_close(v, rv, 1e-8, 1e-4, "v");
  }
}

TEST_CASE("adamw_step's gradient scale and working copy are the scale, AdamW and convert passes",
          "[adamw]") {
  const std::int64_t n = 100003;
  const Vec p0 = random_vec(n, 1), g0 = random_vec(n, 2), m0 = random_vec(n, 3, -0.1f, 0.1f);
  const Vec v0 = random_vec(n, 4, 0.0f, 0.01f);
  for (const DType copy : {DType::F32, DType::BF16}) {
    INFO("copy " << to_string(copy));
    const ptrain::kernels::AdamWStep s{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.37f};
    Vec p = p0, g = g0, m = m0, v = v0;  // the separate passes
    ops().scale(buf(g), s.grad_scale, n);
    ptrain::kernels::AdamWStep unscaled = s;
    unscaled.grad_scale = 1.0f;
    ops().adamw_step(buf(p), buf(g), buf(m), buf(v), Buf{}, n, unscaled);
    HostTensor want(Vec(n, 0.0f), copy);
    ops().convert(want.buf(), buf(p), n);

    Vec fp = p0, fm = m0, fv = v0;  // fused
    HostTensor got(Vec(n, 0.0f), copy);
    ops().adamw_step(buf(fp), buf(g0), buf(fm), buf(fv), got.buf(), n, s);
    CHECK(std::memcmp(fp.data(), p.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(fm.data(), m.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(fv.data(), v.data(), n * sizeof(float)) == 0);
    CHECK(got.bits() == want.bits());
  }
  Vec p{1.0f}, g{1.0f}, m{0.0f}, v{0.0f};
  IVec wrong{0};
  REQUIRE_THROWS_AS(
      ops().adamw_step(buf(p), buf(g), buf(m), buf(v), buf(wrong), 1, {0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f}),
      std::invalid_argument);
}

TEST_CASE("adamw_step rejects step 0", "[adamw][errors]") {
  Vec p{1.0f}, g{1.0f}, m{0.0f}, v{0.0f};
  REQUIRE_THROWS_AS(
      ops().adamw_step(buf(p), buf(g), buf(m), buf(v), Buf{}, 1, {0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 1.0f}),
      std::invalid_argument);
}
