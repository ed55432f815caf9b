// add / accumulate / scale / fill on the serial and the parallel path, and sum_squares in double.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;

TEST_CASE("elementwise ops", "[elementwise]") {
  for (const std::size_t n : {std::size_t{13}, std::size_t{100003}}) {
    INFO("n=" << n);
    const auto len = static_cast<std::int64_t>(n);
    const Vec a = random_vec(n, 1);
    const Vec b = random_vec(n, 2);
    Vec out = nan_vec(n);
    ops().add(buf(out), buf(a), buf(b), len);
    DVec ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = a[i] + b[i];
    check_close(out, ref, 0.0, 1e-7, "add");

    Vec acc = a;
    ops().accumulate(buf(acc), buf(b), len);
    check_close(acc, out, 0.0, 0.0, "accumulate");

    Vec s = a;
    ops().scale(buf(s), -0.375f, len);
    for (std::size_t i = 0; i < n; ++i) ref[i] = a[i] * -0.375;
    check_close(s, ref, 0.0, 1e-7, "scale");

    Vec f = nan_vec(n);
    ops().fill(buf(f), 2.5f, len);
    check_close(f, DVec(n, 2.5), 0.0, 0.0, "fill");
  }
}

TEST_CASE("sum_squares accumulates in double", "[reduce]") {
  for (const std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{1000003}}) {
    INFO("n=" << n);
    const Vec x = random_vec(n, 3, -3.0f, 3.0f);
    double ref = 0.0;
    for (float v : x) ref += double(v) * v;
    const double got = ops().sum_squares(buf(x), static_cast<std::int64_t>(n));
    CHECK(std::fabs(got - ref) <= 1e-12 * std::max(1.0, ref));
  }
  // Small squares next to a large one: in float 1e8 + 1e-8 == 1e8 and they vanish; in double they
  // add up to ~1e-5 (each add still rounds to the 1.5e-8 grid of 1e8, hence a band).
  Vec x(1001, 1e-4f);
  x[0] = 1e4f;
  const double got = ops().sum_squares(buf(x), 1001);
  CHECK(got - 1e8 > 0.5e-5);
  CHECK(got - 1e8 < 2e-5);
}
