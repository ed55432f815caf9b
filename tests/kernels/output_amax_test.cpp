// The `amax` an op writes beside its output (ops.h; FP8 current scaling reads it instead of a pass
// of its own): for every op that takes one, in F32 and BF16, the outputs are bit for bit those of the
// call without it, and the amax is abs_max over the output as stored -- the largest |value| of the
// rounded BF16 values, NaN where one is -- overwriting what amax held.
#include <functional>
#include <string>

#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using ptrain::kernels::Buf;
using ptrain::kernels::DType;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kStale = 1e30f;  // what amax held before: overwritten, never combined

// An op run into fresh outputs, given the inputs' values and amax (none() for none); its outputs.
using Run = std::function<std::vector<HostTensor>(const std::vector<Vec>& inputs, DType dtype, Buf amax)>;

struct Case {
  std::string name;
  std::vector<Vec> inputs;
  int amaxes;  // outputs with an amax: the first `amaxes` of what the run returns
  Run run;
};

// Runs `c` without and with amax, with and without a NaN in its first input.
void check_case(const Case& c, DType dtype) {
  for (const bool with_nan : {false, true}) {
    std::vector<Vec> inputs = c.inputs;
    if (with_nan) inputs[0][inputs[0].size() / 3] = kNaN;
    INFO(c.name << " " << (dtype == DType::BF16 ? "bf16" : "f32") << (with_nan ? " with a NaN" : ""));
    const std::vector<HostTensor> plain = c.run(inputs, dtype, none());
    Vec amax(static_cast<std::size_t>(c.amaxes), kStale);
    std::vector<HostTensor> fused = c.run(inputs, dtype, buf(amax));
    REQUIRE(fused.size() == plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(fused[i].bits() == plain[i].bits());
    for (int i = 0; i < c.amaxes; ++i) {
      float want = 0;
      const Vec out = fused[static_cast<std::size_t>(i)].values();
      ops().abs_max(scalar(want), fused[static_cast<std::size_t>(i)].buf(), static_cast<std::int64_t>(out.size()),
                    false);
      const float got = amax[static_cast<std::size_t>(i)];
      if (with_nan)
        CHECK(std::isnan(got));
      else
        CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
      CHECK(got != kStale);
    }
  }
}

HostTensor zeros(std::size_t n, DType dtype) { return HostTensor(Vec(n, 0.0f), dtype); }

}  // namespace

TEST_CASE("an op's amax is abs_max over its output as stored, taken in its own pass", "[fp8]") {
  // Rows wider than a chunk and element counts over several of parallel_chunks' chunks.
  constexpr int N = 37, C = 203;
  constexpr std::size_t NC = static_cast<std::size_t>(N) * C, n = 100003;
  const Vec x = random_vec(NC, 1, -3.0f, 3.0f), y = random_vec(NC, 2), w = random_vec(C, 3, 0.5f, 1.5f),
            b = random_vec(C, 4, -0.2f, 0.2f);
  const Vec e1 = random_vec(n, 5, -4.0f, 4.0f), e2 = random_vec(n, 6), e3 = random_vec(n, 7);
  auto host = [](const Vec& v, DType t) { return HostTensor(v, t); };
  std::vector<Case> cases;
  cases.push_back({"layernorm_forward", {x, w, b}, 1, [&](const std::vector<Vec>& in, DType t, Buf amax) {
                     HostTensor xi = host(in[0], t), wi = host(in[1], t), bi = host(in[2], t), out = zeros(NC, t);
                     Vec mean(N), rstd(N);
                     ops().layernorm_forward(out.buf(), buf(mean), buf(rstd), xi.buf(), wi.buf(), bi.buf(), N, C,
                                             1e-5f, amax);
                     return std::vector<HostTensor>{out, HostTensor(mean, DType::F32), HostTensor(rstd, DType::F32)};
                   }});
  cases.push_back({"rmsnorm_forward", {x, w}, 1, [&](const std::vector<Vec>& in, DType t, Buf amax) {
                     HostTensor xi = host(in[0], t), wi = host(in[1], t), out = zeros(NC, t);
                     Vec rstd(N);
                     ops().rmsnorm_forward(out.buf(), buf(rstd), xi.buf(), wi.buf(), N, C, 1e-5f, amax);
                     return std::vector<HostTensor>{out, HostTensor(rstd, DType::F32)};
                   }});
  cases.push_back({"add_layernorm_forward", {x, y, w, b}, 1, [&](const std::vector<Vec>& in, DType t, Buf amax) {
                     HostTensor a = host(in[0], t), bb = host(in[1], t), wi = host(in[2], t), bi = host(in[3], t);
                     HostTensor out = zeros(NC, t), sum = zeros(NC, t);
                     ops().add_layernorm_forward(sum.buf(), out.buf(), none(), none(), a.buf(), bb.buf(), wi.buf(),
                                                 bi.buf(), N, C, 1e-5f, amax);
                     return std::vector<HostTensor>{out, sum};
                   }});
  cases.push_back({"add_rmsnorm_forward", {x, y, w}, 1, [&](const std::vector<Vec>& in, DType t, Buf amax) {
                     HostTensor a = host(in[0], t), bb = host(in[1], t), wi = host(in[2], t);
                     HostTensor out = zeros(NC, t), sum = zeros(NC, t);
                     ops().add_rmsnorm_forward(sum.buf(), out.buf(), none(), a.buf(), bb.buf(), wi.buf(), N, C,
                                               1e-5f, amax);
                     return std::vector<HostTensor>{out, sum};
                   }});
  cases.push_back({"gelu_backward", {e2, e1}, 1, [&](const std::vector<Vec>& in, DType t, Buf amax) {
                     HostTensor d_out = host(in[0], t), xi = host(in[1], t), d_in = zeros(n, t);
                     ops().gelu_backward(d_in.buf(), d_out.buf(), xi.buf(), n, amax);
                     return std::vector<HostTensor>{d_in};
                   }});
  cases.push_back({"swiglu_forward", {e1, e2}, 1, [&](const std::vector<Vec>& in, DType t, Buf amax) {
                     HostTensor g = host(in[0], t), u = host(in[1], t), out = zeros(n, t);
                     ops().swiglu_forward(out.buf(), g.buf(), u.buf(), n, amax);
                     return std::vector<HostTensor>{out};
                   }});
  cases.push_back({"swiglu_backward", {e3, e1, e2}, 2, [&](const std::vector<Vec>& in, DType t, Buf amax) {
                     HostTensor d_out = host(in[0], t), g = host(in[1], t), u = host(in[2], t);
                     HostTensor d_gate = zeros(n, t), d_up = zeros(n, t);
                     ops().swiglu_backward(d_gate.buf(), d_up.buf(), d_out.buf(), g.buf(), u.buf(), n, amax);
                     return std::vector<HostTensor>{d_gate, d_up};
                   }});
  for (const DType dtype : {DType::F32, DType::BF16})
    for (const Case& c : cases) check_case(c, dtype);
}

TEST_CASE("fp8_gemm_gelu's amax is abs_max over its GELU output", "[fp8]") {
  constexpr int M = 48, N = 80, K = 64;
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const bool with_nan : {false, true}) {
      std::vector<std::uint8_t> a(M * K), b(N * K);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>((i * 37u + 11u) % 0x7Eu);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(((i * 53u + 5u) % 0x7Eu) | 0x80u * (i % 3 == 0));
      float a_inv = 0.25f, b_inv = 0.5f;
      Vec bias_values = random_vec(N, 9);
      if (with_nan) bias_values[17] = kNaN;
      HostTensor bias(bias_values, dtype);
      auto run = [&](Buf amax) {
        std::vector<HostTensor> outs{HostTensor(Vec(M * N), dtype), HostTensor(Vec(M * N), dtype)};
        ops().fp8_gemm_gelu(outs[0].buf(), outs[1].buf(), {a.data(), DType::E4M3}, {b.data(), DType::E4M3},
                            scalar(a_inv), scalar(b_inv), bias.buf(), M, N, K, ptrain::kernels::Fp8Sums::Fast, amax);
        return outs;
      };
      const std::vector<HostTensor> plain = run(none());
      float amax = kStale, want = 0;
      std::vector<HostTensor> fused = run(scalar(amax));
      CHECK(fused[0].bits() == plain[0].bits());
      CHECK(fused[1].bits() == plain[1].bits());
      ops().abs_max(scalar(want), fused[0].buf(), M * N, false);
      if (with_nan)
        CHECK(std::isnan(amax));
      else
        CHECK(amax == want);
    }
  }
}

TEST_CASE("an op's amax must be F32", "[fp8]") {
  Vec g = random_vec(8, 1), u = random_vec(8, 2), out(8);
  std::uint16_t bf16_amax = 0;
  CHECK_THROWS_WITH(ops().swiglu_forward(buf(out), buf(g), buf(u), 8, {&bf16_amax, DType::BF16}),
                    Catch::Contains("amax"));
}
