// rope_forward against HF's `q * cos + rotate_half(q) * sin` (in double) with a position offset;
// rope_backward is the inverse rotation and the gradient of the forward.
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;

namespace {

// HF LlamaRotaryEmbedding + apply_rotary_pos_emb, written out in double.
DVec hf_rope(const Vec& x, int B, int T, int H, int D, double theta, int pos0) {
  const int half = D / 2;
  DVec out(x.size());
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      std::vector<double> cos_full(D), sin_full(D);
      for (int i = 0; i < half; ++i) {
        const double inv_freq = 1.0 / std::pow(theta, double(2 * i) / D);
        const double angle = double(pos0 + t) * inv_freq;
        cos_full[i] = cos_full[i + half] = std::cos(angle);  // emb = cat(freqs, freqs)
        sin_full[i] = sin_full[i + half] = std::sin(angle);
      }
      for (int h = 0; h < H; ++h) {
        const std::size_t base = ((std::size_t(b) * T + t) * H + h) * D;
        for (int d = 0; d < D; ++d) {
          const double rotated = d < half ? -double(x[base + d + half]) : double(x[base + d - half]);
          out[base + d] = x[base + d] * cos_full[d] + rotated * sin_full[d];
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("rope_forward matches HF rotate_half with a position offset", "[rope]") {
  const int B = 2, T = 5, H = 3, D = 6;
  for (const auto& [theta, pos0] :
       {std::pair{10000.0f, 0}, std::pair{10000.0f, 7}, std::pair{500000.0f, 7}, std::pair{10000.0f, 1000}}) {
    INFO("theta=" << theta << " pos0=" << pos0);
    Vec x = random_vec(B * T * H * D, 1);
    const DVec ref = hf_rope(x, B, T, H, D, theta, pos0);
    ops().rope_forward(buf(x), B, T, H, D, theta, pos0);
    // fp32 angles (as HF computes them) carry an error proportional to the position.
    check_close(x, ref, 2e-6 + 2e-7 * (pos0 + T), 1e-6, "rotated x");
  }
}

TEST_CASE("rope: a split sequence with pos0 equals the whole", "[rope]") {
  const int B = 1, T = 8, H = 2, D = 8;
  const Vec x = random_vec(B * T * H * D, 5);
  Vec whole = x;
  ops().rope_forward(buf(whole), B, T, H, D, 10000.0f, 3);
  Vec second(x.begin() + (T / 2) * H * D, x.end());
  ops().rope_forward(buf(second), B, T / 2, H, D, 10000.0f, 3 + T / 2);
  const Vec whole_second(whole.begin() + (T / 2) * H * D, whole.end());
  check_close(second, whole_second, 0.0, 0.0, "second half");
}

TEST_CASE("rope_backward inverts the rotation and is its gradient", "[rope][grad]") {
  const int B = 2, T = 5, H = 3, D = 6, pos0 = 7;
  const float theta = 10000.0f;
  Vec x = random_vec(B * T * H * D, 11);
  Vec y = x;
  ops().rope_forward(buf(y), B, T, H, D, theta, pos0);
  ops().rope_backward(buf(y), B, T, H, D, theta, pos0);
  check_close(y, x, 1e-6, 1e-6, "backward(forward(x))");

  const Vec r = random_vec(x.size(), 12);
  Vec g = r;
  ops().rope_backward(buf(g), B, T, H, D, theta, pos0);
  auto loss = [&] {
    Vec o = x;
    ops().rope_forward(buf(o), B, T, H, D, theta, pos0);
    return weighted_sum(o, r);
  };
  check_grad("d_x", x, g, loss);
}

TEST_CASE("rope rejects an odd head dim", "[rope][errors]") {
  Vec x(2 * 3);
  REQUIRE_THROWS_AS(ops().rope_forward(buf(x), 1, 2, 1, 3, 10000.0f, 0), std::invalid_argument);
}
