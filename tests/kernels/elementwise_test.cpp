// add / accumulate / scale / fill on the serial and the parallel path, and sum / sum_squares in double.
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

TEST_CASE("sum and sum_squares add in double and round once", "[reduce]") {
  for (const std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{1000003}}) {
    INFO("n=" << n);
    const Vec x = random_vec(n, 3, -3.0f, 3.0f);
    double ref_sum = 0.0, ref_squares = 0.0;
    for (float v : x) {
      ref_sum += v;
      ref_squares += double(v) * v;
    }
    float sum = -1, squares = -1;
    ops().sum(scalar(sum), buf(x), static_cast<std::int64_t>(n));
    ops().sum_squares(scalar(squares), buf(x), static_cast<std::int64_t>(n));
    // Within the one rounding to float (2^-24 relative), whatever the order of the double sums.
    CHECK(std::fabs(sum - ref_sum) <= 6e-8 * std::max(1.0, std::fabs(ref_sum)));
    CHECK(std::fabs(squares - ref_squares) <= 6e-8 * std::max(1.0, ref_squares));
  }
  // Small terms next to a large one: in float 1 + 1e-8 == 1 and they would vanish; in double the
  // million of them add up to 0.01.
  Vec x(1000001, 1e-4f);
  x[0] = 1.0f;
  float squares = 0;
  ops().sum_squares(scalar(squares), buf(x), static_cast<std::int64_t>(x.size()));
  CHECK(squares == Approx(1.01).epsilon(1e-6));
  Vec y(1000001, 1e-8f);
  y[0] = 1.0f;
  float sum = 0;
  ops().sum(scalar(sum), buf(y), static_cast<std::int64_t>(y.size()));
  CHECK(sum == Approx(1.01).epsilon(1e-6));
}
