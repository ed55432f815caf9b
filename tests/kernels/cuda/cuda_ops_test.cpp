// Every CUDA op but attention (attention_test.cpp) against cpu_ops() on the same random inputs, in the
// style of ggml's test-backend-ops: odd sizes (nothing a multiple of 32), outputs poisoned with NaN,
// gradients pre-filled with random values to tell accumulate from overwrite, F32 and BF16 storage.
// With BF16 storage the CPU reference runs on the bf16-rounded inputs, so only the device's own
// rounding of its outputs (and fp32 summation order) separates the two.
// Tolerances, abs + rel*|ref|: fp32 outputs ~1e-5 (a little more abs for long reductions), bf16
// outputs 1e-2; some results are bitwise by construction and checked so (embedding grads, adds, the
// fused residual add + norm against the device's own add then norm, linear + GELU's fallback against
// the device's own linear then GELU). cuBLASLt's GELU epilogue gets bf16's tolerance (see there).
#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tests/kernels/cuda/device_buffer.h"
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels;
using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;

namespace {

const Ops& gpu() {
  return cuda_ops();
}
const Ops& cpu() {
  return cpu_ops();
}

struct Tol {
  double atol, rtol;
};

// Tolerance for an output stored as `t`.
Tol tol(DType t, double fp32_atol = 1e-5) {
  return t == BF16 ? Tol{1e-2, 1e-2} : Tol{fp32_atol, 1e-5};
}
constexpr Tol kExact{0.0, 0.0};

void expect_close(const DeviceBuffer& got, const Vec& ref, Tol t, const std::string& what) {
  check_close(got.download(), ref, t.atol, t.rtol, what);
}

}  // namespace

// ------------------------------------------------------------------ interface

TEST_CASE("cuda_ops is the CUDA device with one compute stream", "[cuda][contract]") {
  CHECK(gpu().device() == Device::Cuda);
  CHECK(&gpu() == &cuda_ops());
  CHECK(cuda_device_available());
  CHECK(cuda_compute_stream() != nullptr);
  CHECK(cuda_compute_stream() == cuda_compute_stream());
}

TEST_CASE("cuda memory: zeroed allocations and copies in, within and out of the device", "[cuda][memory]") {
  const Ops& ops = cuda_ops();
  const std::size_t bytes = 1001 * sizeof(float);
  float* a = static_cast<float*>(ops.allocate(bytes));
  float* b = static_cast<float*>(ops.allocate(bytes));
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 256 == 0);
  std::vector<float> host(1001, -1.0f);
  ops.copy_to_host(host.data(), {a, F32}, bytes);
  for (float x : host) REQUIRE(x == 0.0f);
  const Vec in = random_vec(1001, 7);
  ops.copy_to_device({a, F32}, in.data(), bytes);
  ops.copy({b, F32}, {a, F32}, bytes);
  ops.copy_to_host(host.data(), {b, F32}, bytes);
  for (std::size_t i = 0; i < host.size(); ++i) REQUIRE(host[i] == in[i]);
  ops.release(a);
  ops.release(b);
  ops.release(nullptr);
}

TEST_CASE("cuda ops reject bad arguments with std::invalid_argument naming the op", "[cuda][contract]") {
  const DeviceBuffer fa(random_vec(64, 1), F32), fb(random_vec(64, 2), F32), fc(random_vec(64, 3), F32);
  const DeviceBuffer ba(random_vec(64, 4), BF16);
  const DeviceBuffer ia(IVec(16, 0));
  const Buf f = fa.buf(), g = fb.buf(), h = fc.buf(), bf = ba.buf(), i32 = ia.buf();
  const Buf none_buf{};
  const Ops& o = gpu();
  REQUIRE_THROWS_WITH(o.linear_forward(i32, f, g, none_buf, 2, 2, 2), Contains("cuda linear_forward"));
  REQUIRE_THROWS_WITH(o.linear_forward(f, g, none_buf, none_buf, 2, 2, 2), Contains("'weight' is null"));
  REQUIRE_THROWS_WITH(o.linear_forward(bf, f, g, none_buf, 2, 2, 2),
                      Contains("'out' must be f32 when 'in' is f32"));
  REQUIRE_THROWS_WITH(o.linear_forward(f, bf, g, none_buf, 2, 2, 2), Contains("must have the dtype of 'in'"));
  REQUIRE_THROWS_WITH(o.linear_forward(f, g, h, bf, 2, 2, 2),
                      Contains("'bias' must have the dtype of 'out'"));
  REQUIRE_THROWS_WITH(o.linear_backward(f, g, none_buf, bf, f, g, 2, 2, 2), Contains("linear_backward"));
  REQUIRE_THROWS_WITH(o.linear_gelu_forward(f, bf, g, h, none_buf, 2, 2, 2),
                      Contains("cuda linear_gelu_forward") && Contains("'pre' must be f32 when 'in' is f32"));
  REQUIRE_THROWS_WITH(
      o.linear_backward_gelu(f, none_buf, none_buf, g, h, f, bf, 2, 2, 2),
      Contains("cuda linear_backward_gelu") && Contains("'pre' must have the dtype of 'd_pre'"));
  REQUIRE_THROWS_WITH(o.embedding_forward(f, g, h, none_buf, 2, 2, 2), Contains("'tokens' must be i32"));
  REQUIRE_THROWS_WITH(o.embedding_backward(f, none_buf, g, f, 2, 2, 2), Contains("embedding_backward"));
  REQUIRE_THROWS_WITH(o.layernorm_forward(f, g, h, i32, f, none_buf, 2, 2, 1e-5f),
                      Contains("layernorm_forward"));
  REQUIRE_THROWS_WITH(o.layernorm_backward(f, g, none_buf, bf, f, g, h, f, 2, 2),
                      Contains("layernorm_backward"));
  REQUIRE_THROWS_WITH(o.rmsnorm_forward(f, g, i32, f, 2, 2, 1e-5f), Contains("rmsnorm_forward"));
  REQUIRE_THROWS_WITH(o.rmsnorm_backward(f, g, h, f, g, bf, 2, 2), Contains("'rstd' must be f32"));
  REQUIRE_THROWS_WITH(
      o.add_layernorm_forward(f, g, none_buf, none_buf, bf, h, f, none_buf, 2, 2, 1e-5f),
      Contains("cuda add_layernorm_forward") && Contains("'a' must have the dtype of 'x_out'"));
  REQUIRE_THROWS_WITH(
      o.add_layernorm_forward(f, g, none_buf, none_buf, h, none_buf, f, none_buf, 2, 2, 1e-5f),
      Contains("'b' is null"));
  REQUIRE_THROWS_WITH(
      o.add_rmsnorm_forward(bf, g, none_buf, bf, bf, f, 2, 2, 1e-5f),
      Contains("cuda add_rmsnorm_forward") && Contains("'x_out' must have the dtype of 'out'"));
  REQUIRE_THROWS_WITH(o.add_rmsnorm_forward(f, g, bf, h, f, g, 2, 2, 1e-5f), Contains("'rstd' must be f32"));
  REQUIRE_THROWS_WITH(o.rope_forward(i32, 1, 2, 1, 2, 1e4f, 0), Contains("rope_forward"));
  REQUIRE_THROWS_WITH(o.rope_backward(f, 1, 2, 1, 3, 1e4f, 0), Contains("D must be even"));
  REQUIRE_THROWS_WITH(o.rope_forward(f, 1, 1, 1, 514, 1e4f, 0), Contains("D must be at most 512"));
  REQUIRE_THROWS_WITH(o.gelu_forward(f, bf, 4), Contains("gelu_forward"));
  REQUIRE_THROWS_WITH(o.gelu_backward(f, g, i32, 4), Contains("gelu_backward"));
  REQUIRE_THROWS_WITH(o.swiglu_forward(f, g, bf, 4), Contains("swiglu_forward"));
  REQUIRE_THROWS_WITH(o.swiglu_backward(f, g, h, f, bf, 4), Contains("swiglu_backward"));
  REQUIRE_THROWS_WITH(o.add(f, g, bf, 4), Contains("cuda add"));
  REQUIRE_THROWS_WITH(o.accumulate(i32, f, 4), Contains("accumulate"));
  REQUIRE_THROWS_WITH(o.scale(i32, 2.0f, 4), Contains("scale"));
  REQUIRE_THROWS_WITH(o.fill(i32, 2.0f, 4), Contains("fill"));
  REQUIRE_THROWS_WITH(o.cross_entropy_forward_backward(f, g, h, f, 2, 2, 2, 1.0f),
                      Contains("'targets' must be i32"));
  REQUIRE_THROWS_WITH(o.cross_entropy_forward_backward(f, g, h, i32, 2, 3, 2, 1.0f),
                      Contains("V must not exceed Vp"));
  REQUIRE_THROWS_WITH(o.adamw_step(f, g, h, bf, Buf{}, 4, {0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1, 1.0f}),
                      Contains("'v' must be f32"));
  REQUIRE_THROWS_WITH(o.adamw_step(f, g, h, f, Buf{}, 4, {0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 0, 1.0f}),
                      Contains("step must be >= 1"));
  REQUIRE_THROWS_WITH(o.sum_squares(f, i32, 4),
                      Contains("sum_squares") && Contains("'x' must be f32 or bf16"));
  REQUIRE_THROWS_WITH(o.sum(bf, f, 4), Contains("cuda sum") && Contains("'out' must be f32"));
  REQUIRE_THROWS_WITH(o.add(f, g, h, -1), Contains("negative size"));
  REQUIRE_THROWS_AS(o.scale(f, 2.0f, -3), std::invalid_argument);
}

// ------------------------------------------------------------------ linear

TEST_CASE("cuda linear_forward matches the CPU", "[cuda][linear]") {
  struct Case {
    int M, N, K;
    bool bias;
    DType in, out;
    bool misaligned;  // every pointer one element off its allocation (alignment fallbacks)
  };
  for (const Case c :
       {Case{37, 67, 45, true, F32, F32, false}, Case{37, 67, 45, false, F32, F32, false},
        Case{37, 67, 45, true, F32, F32, true}, Case{1, 1, 1, true, F32, F32, false},
        Case{130, 33, 257, true, F32, F32, false}, Case{37, 67, 45, true, BF16, BF16, false},
        Case{37, 67, 45, true, BF16, F32, false}, Case{37, 67, 45, false, BF16, BF16, false},
        Case{37, 67, 45, true, BF16, BF16, true}, Case{64, 128, 96, true, BF16, BF16, false}}) {
    INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " bias=" << c.bias << " in=" << to_string(c.in)
              << " out=" << to_string(c.out) << " misaligned=" << c.misaligned);
    const Vec in = as_dtype(random_vec(c.M * c.K, 1), c.in);
    const Vec w = as_dtype(random_vec(c.N * c.K, 2), c.in);
    const Vec b = as_dtype(random_vec(c.N, 3), c.out);
    Vec ref = nan_vec(c.M * c.N);
    cpu().linear_forward(buf(ref), buf(in), buf(w), c.bias ? buf(b) : none(), c.M, c.N, c.K);

    const std::size_t off = c.misaligned ? 1 : 0;
    auto padded = [off](Vec v) {
      v.insert(v.begin(), off, 0.5f);
      return v;
    };
    const DeviceBuffer d_in(padded(in), c.in), d_w(padded(w), c.in), d_b(padded(b), c.out);
    const DeviceBuffer d_out(padded(nan_vec(c.M * c.N)), c.out);
    gpu().linear_forward(d_out.at(off), d_in.at(off), d_w.at(off), c.bias ? d_b.at(off) : none(), c.M, c.N,
                         c.K);
    Vec got = d_out.download();
    got.erase(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(off));
    const Tol t = tol(c.out, 3e-5);
    check_close(got, ref, t.atol, t.rtol, "out");
  }
}

TEST_CASE("cuda linear_forward with K == 0 writes the bias (or zeros)", "[cuda][linear]") {
  const int M = 5, N = 7;
  const Vec b = random_vec(N, 3);
  const DeviceBuffer d_in(Vec(1, 1.0f), F32), d_w(Vec(1, 1.0f), F32), d_b(b, F32);
  const DeviceBuffer out(nan_vec(M * N), F32);
  gpu().linear_forward(out.buf(), d_in.buf(), d_w.buf(), d_b.buf(), M, N, 0);
  Vec ref(M * N);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) ref[m * N + n] = b[n];
  }
  expect_close(out, ref, kExact, "out = bias");
  gpu().linear_forward(out.buf(), d_in.buf(), d_w.buf(), none(), M, N, 0);
  expect_close(out, Vec(M * N, 0.0f), kExact, "out = 0");
}

TEST_CASE("cuda linear_backward matches the CPU: d_in overwritten, d_weight and d_bias accumulated",
          "[cuda][linear][grad]") {
  struct Case {
    int M, N, K;
    DType compute, d_in, d_param;
  };
  for (const Case c : {Case{37, 67, 45, F32, F32, F32}, Case{130, 33, 257, F32, F32, F32},
                       Case{37, 67, 45, BF16, BF16, F32}, Case{37, 67, 45, BF16, F32, BF16},
                       // 65 row splits for d_bias's column sums: more than one per lane of a warp
                       Case{4100, 33, 16, BF16, BF16, F32},
                       // aligned as a model's layers are: d_bias from the d_weight GEMM's BGRADB epilogue
                       Case{512, 256, 128, BF16, BF16, F32}, Case{512, 256, 128, F32, F32, F32}}) {
    INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " compute=" << to_string(c.compute)
              << " d_in=" << to_string(c.d_in) << " d_param=" << to_string(c.d_param));
    const Vec in = as_dtype(random_vec(c.M * c.K, 11), c.compute);
    const Vec w = as_dtype(random_vec(c.N * c.K, 12), c.compute);
    const Vec dy = as_dtype(random_vec(c.M * c.N, 13), c.compute);
    const Vec dw0 = as_dtype(random_vec(c.N * c.K, 14), c.d_param);
    const Vec db0 = as_dtype(random_vec(c.N, 15), c.d_param);
    Vec ref_din = nan_vec(c.M * c.K), ref_dw = dw0, ref_db = db0;
    cpu().linear_backward(buf(ref_din), buf(ref_dw), buf(ref_db), buf(dy), buf(in), buf(w), c.M, c.N, c.K);

    const DeviceBuffer g_in(in, c.compute), g_w(w, c.compute), g_dy(dy, c.compute);
    const DeviceBuffer g_din(nan_vec(c.M * c.K), c.d_in), g_dw(dw0, c.d_param), g_db(db0, c.d_param);
    const std::uint64_t epilogues = cuda_bias_grads_from_epilogue();
    gpu().linear_backward(g_din.buf(), g_dw.buf(), g_db.buf(), g_dy.buf(), g_in.buf(), g_w.buf(), c.M, c.N,
                          c.K);
    // A model's aligned bf16 layer takes its bias gradient from the epilogue (training's path).
    if (c.M == 512 && c.compute == BF16) CHECK(cuda_bias_grads_from_epilogue() == epilogues + 1);
    expect_close(g_din, ref_din, tol(c.d_in, 3e-5), "d_in");
    expect_close(g_dw, ref_dw, tol(c.d_param, 1e-4), "d_weight");
    expect_close(g_db, ref_db, tol(c.d_param, 3e-5), "d_bias");

    // Optional outputs: d_bias alone accumulates once more.
    Vec ref_db2 = ref_db;
    cpu().linear_backward(none(), none(), buf(ref_db2), buf(dy), none(), none(), c.M, c.N, c.K);
    gpu().linear_backward(none(), none(), g_db.buf(), g_dy.buf(), none(), none(), c.M, c.N, c.K);
    expect_close(g_db, ref_db2, tol(c.d_param, 3e-5), "d_bias alone, accumulated twice");
  }
}

TEST_CASE("cuda linear_input_grad_add matches the CPU: d_in += d_out @ weight", "[cuda][linear][grad]") {
  for (const auto& [M, N, K, t] : {std::tuple{37, 67, 45, F32}, std::tuple{37, 67, 45, BF16},
                                   std::tuple{512, 128, 256, BF16}}) {
    INFO("M=" << M << " N=" << N << " K=" << K << " dtype=" << to_string(t));
    const Vec w = as_dtype(random_vec(N * K, 21), t), dy = as_dtype(random_vec(M * N, 22), t);
    const Vec d_in0 = as_dtype(random_vec(M * K, 23), t);
    Vec ref = d_in0;
    cpu().linear_input_grad_add(buf(ref), buf(dy), buf(w), M, N, K);  // F32 on the CPU, rounded below
    ref = as_dtype(ref, t);
    const DeviceBuffer g_w(w, t), g_dy(dy, t), g_in(d_in0, t);
    gpu().linear_input_grad_add(g_in.buf(), g_dy.buf(), g_w.buf(), M, N, K);
    expect_close(g_in, ref, tol(t, 3e-5), "d_in");
  }
}

TEST_CASE("cuda linear_backward with N == 0 zeroes d_in", "[cuda][linear][grad]") {
  const int M = 5, K = 9;
  const DeviceBuffer one(Vec(1, 1.0f), F32);
  const DeviceBuffer d_in(nan_vec(M * K), F32);
  gpu().linear_backward(d_in.buf(), none(), none(), one.buf(), one.buf(), one.buf(), M, 0, K);
  expect_close(d_in, Vec(M * K, 0.0f), kExact, "d_in");
}

// ------------------------------------------------------------------ linear + GELU

namespace {

// Where cuBLASLt's GELU epilogue may run (BF16 outputs only), out and d_pre hold cuBLASLt's evaluation
// of the tanh formula, not our kernels' (it may use a hardware tanh, good to ~2^-11 relative), so they
// are held to bf16's tolerance. F32 outputs, and shapes and views the epilogue must decline, are held
// to the linear and GELU tolerances and, bit for bit, to the device's own unfused pair: the fallback
// is that pair.
constexpr Tol kGeluEpilogue{1e-2, 1e-2};

// v behind `off` filler elements: a view `off` elements in is misaligned for off = 1.
Vec offset_by(Vec v, std::size_t off) {
  v.insert(v.begin(), off, 0.5f);
  return v;
}

}  // namespace

TEST_CASE("cuda linear_gelu_forward matches the CPU, and its fallback the device's unfused pair",
          "[cuda][linear][linear_gelu]") {
  struct Case {
    int M, N, K;
    bool bias;
    DType in, out;
    bool misaligned;  // every pointer one element off its allocation
  };
  for (const Case c :
       {// N a multiple of 8, aligned: GELU_AUX[_BIAS] for BF16 out where cuBLASLt has an algorithm
        Case{37, 64, 45, true, F32, F32, false}, Case{37, 64, 45, false, F32, F32, false},
        Case{37, 64, 45, true, BF16, BF16, false}, Case{37, 64, 45, true, BF16, F32, false},
        Case{64, 128, 96, false, BF16, BF16, false},
        // the fallback: pre's leading dim N = 67, misaligned views, an empty sum
        Case{37, 67, 45, true, F32, F32, false}, Case{37, 67, 45, true, BF16, BF16, false},
        Case{37, 64, 45, true, BF16, BF16, true}, Case{5, 8, 0, true, F32, F32, false}}) {
    const bool fallback = c.out == F32 || c.N % 8 != 0 || c.misaligned || c.K == 0;
    INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " bias=" << c.bias << " in=" << to_string(c.in)
              << " out=" << to_string(c.out) << " misaligned=" << c.misaligned << " fallback=" << fallback);
    // Weights in [-0.5, 0.5] keep most of pre within [-4, 4], where GELU bends.
    const Vec in = random_vec(std::max(c.M * c.K, 1), 1);
    const Vec w = random_vec(std::max(c.N * c.K, 1), 2, -0.5f, 0.5f);
    const Vec b = random_vec(c.N, 3);
    const int n = c.M * c.N;
    HostTensor h_in(in, c.in), h_w(w, c.in), h_b(b, c.out), ref_out(nan_vec(n), c.out),
        ref_pre(nan_vec(n), c.out);
    cpu().linear_gelu_forward(ref_out.buf(), ref_pre.buf(), h_in.buf(), h_w.buf(),
                              c.bias ? h_b.buf() : none(), c.M, c.N, c.K);

    const std::size_t off = c.misaligned ? 1 : 0;
    const DeviceBuffer g_in(offset_by(in, off), c.in), g_w(offset_by(w, off), c.in),
        g_b(offset_by(b, off), c.out);
    const Buf bias = c.bias ? g_b.at(off) : none();
    const DeviceBuffer g_out(offset_by(nan_vec(n), off), c.out), g_pre(offset_by(nan_vec(n), off), c.out);
    gpu().linear_gelu_forward(g_out.at(off), g_pre.at(off), g_in.at(off), g_w.at(off), bias, c.M, c.N, c.K);
    expect_close(g_pre, offset_by(ref_pre.values(), off), tol(c.out, 3e-5), "pre");
    // out against the CPU's GELU of the device's own pre: a pre one bf16 step off the CPU's (GEMM
    // summation order) moves GELU's rounded output by up to two steps, which is not the GELU's error.
    const Vec pre_view = g_pre.download();
    HostTensor device_pre(Vec(pre_view.begin() + static_cast<std::ptrdiff_t>(off), pre_view.end()), c.out);
    HostTensor gelu_of_pre(nan_vec(n), c.out);
    cpu().gelu_forward(gelu_of_pre.buf(), device_pre.buf(), n);
    expect_close(g_out, offset_by(gelu_of_pre.values(), off), fallback ? tol(c.out, 5e-5) : kGeluEpilogue,
                 "out, as GELU of pre");

    if (fallback) {
      const DeviceBuffer u_out(offset_by(nan_vec(n), off), c.out), u_pre(offset_by(nan_vec(n), off), c.out);
      gpu().linear_forward(u_pre.at(off), g_in.at(off), g_w.at(off), bias, c.M, c.N, c.K);
      gpu().gelu_forward(u_out.at(off), u_pre.at(off), n);
      expect_close(g_pre, u_pre.download(), kExact, "pre, as linear_forward");
      expect_close(g_out, u_out.download(), kExact, "out, as linear_forward then gelu_forward");
    }
  }
}

TEST_CASE("cuda linear_backward_gelu matches the CPU, and its fallback the device's unfused pair",
          "[cuda][linear][linear_gelu][grad]") {
  struct Case {
    int M, N, K;
    DType compute, d_pre, d_param;  // compute: d_out, in, weight; pre has d_pre's type
    bool misaligned;                // pre one element off its allocation
  };
  for (const Case c : {// K a multiple of 8, aligned: DGELU for BF16 d_pre where cuBLASLt has an algorithm
                       Case{37, 67, 48, F32, F32, F32, false}, Case{37, 67, 48, BF16, BF16, F32, false},
                       Case{37, 67, 48, BF16, F32, BF16, false},
                       // the fallback: pre's leading dim K = 45, a misaligned pre, N == 0
                       Case{37, 67, 45, F32, F32, F32, false}, Case{37, 67, 45, BF16, BF16, F32, false},
                       Case{37, 67, 48, BF16, BF16, F32, true}, Case{5, 0, 16, F32, F32, F32, false}}) {
    const bool fallback = c.d_pre == F32 || c.K % 8 != 0 || c.misaligned || c.N == 0;
    INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " compute=" << to_string(c.compute)
              << " d_pre=" << to_string(c.d_pre) << " d_param=" << to_string(c.d_param)
              << " misaligned=" << c.misaligned << " fallback=" << fallback);
    const Vec dy = random_vec(std::max(c.M * c.N, 1), 11), in = random_vec(c.M * c.K, 12);
    const Vec w = random_vec(std::max(c.N * c.K, 1), 13, -0.5f, 0.5f),
              pre = random_vec(c.M * c.K, 14, -4.0f, 4.0f);
    const Vec dw0 = random_vec(std::max(c.N * c.K, 1), 15), db0 = random_vec(std::max(c.N, 1), 16);
    HostTensor h_dy(dy, c.compute), h_in(in, c.compute), h_w(w, c.compute), h_pre(pre, c.d_pre);
    HostTensor ref_dpre(nan_vec(c.M * c.K), c.d_pre), ref_dw(dw0, c.d_param), ref_db(db0, c.d_param);
    cpu().linear_backward_gelu(ref_dpre.buf(), ref_dw.buf(), ref_db.buf(), h_dy.buf(), h_in.buf(), h_w.buf(),
                               h_pre.buf(), c.M, c.N, c.K);

    const std::size_t off = c.misaligned ? 1 : 0;
    const DeviceBuffer g_dy(dy, c.compute), g_in(in, c.compute), g_w(w, c.compute);
    const DeviceBuffer g_pre(offset_by(pre, off), c.d_pre), g_dpre(nan_vec(c.M * c.K), c.d_pre);
    const DeviceBuffer g_dw(dw0, c.d_param), g_db(db0, c.d_param);
    gpu().linear_backward_gelu(g_dpre.buf(), g_dw.buf(), g_db.buf(), g_dy.buf(), g_in.buf(), g_w.buf(),
                               g_pre.at(off), c.M, c.N, c.K);
    expect_close(g_dpre, ref_dpre.values(), fallback ? tol(c.d_pre, 5e-5) : kGeluEpilogue, "d_pre");
    expect_close(g_dw, ref_dw.values(), tol(c.d_param, 1e-4), "d_weight (accumulated)");
    expect_close(g_db, ref_db.values(), tol(c.d_param, 3e-5), "d_bias (accumulated)");

    // d_weight and d_bias are linear_backward's on either path (cuBLAS is reproducible run to run),
    // and on the fallback d_pre is the device's linear_backward then gelu_backward in place.
    const DeviceBuffer u_dpre(nan_vec(c.M * c.K), c.d_pre), u_dw(dw0, c.d_param), u_db(db0, c.d_param);
    gpu().linear_backward(u_dpre.buf(), u_dw.buf(), u_db.buf(), g_dy.buf(), g_in.buf(), g_w.buf(), c.M, c.N,
                          c.K);
    gpu().gelu_backward(u_dpre.buf(), u_dpre.buf(), g_pre.at(off), std::int64_t{c.M} * c.K);
    expect_close(g_dw, u_dw.download(), kExact, "d_weight, as linear_backward");
    expect_close(g_db, u_db.download(), kExact, "d_bias, as linear_backward");
    if (fallback)
      expect_close(g_dpre, u_dpre.download(), kExact, "d_pre, as linear_backward then gelu_backward");

    // Without the optional gradients: d_pre overwritten with the same values, d_weight and d_bias untouched.
    const Vec d_pre_first = g_dpre.download(), dw_first = g_dw.download(), db_first = g_db.download();
    gpu().linear_backward_gelu(g_dpre.buf(), none(), none(), g_dy.buf(), g_in.buf(), g_w.buf(), g_pre.at(off),
                               c.M, c.N, c.K);
    expect_close(g_dpre, d_pre_first, kExact, "d_pre alone, overwritten");
    expect_close(g_dw, dw_first, kExact, "d_weight untouched");
    expect_close(g_db, db_first, kExact, "d_bias untouched");
  }
}

// ------------------------------------------------------------------ embedding

TEST_CASE("cuda embedding_forward matches the CPU", "[cuda][embedding]") {
  const int B = 5, T = 7, C = 67, V = 11;
  const int N = B * T;
  const IVec tokens = random_ints(N, 1, 0, V - 1);
  const DeviceBuffer g_tokens(tokens);
  for (const DType t : {F32, BF16}) {
    for (const bool with_pos : {true, false}) {
      INFO("dtype=" << to_string(t) << " positions=" << with_pos);
      const Vec table = as_dtype(random_vec(V * C, 2), t);
      const Vec pos = as_dtype(random_vec(T * C, 3), t);
      Vec ref = nan_vec(N * C);
      cpu().embedding_forward(buf(ref), buf(tokens), buf(table), with_pos ? buf(pos) : none(), N, T, C);
      const DeviceBuffer g_table(table, t), g_pos(pos, t), g_out(nan_vec(N * C), t);
      gpu().embedding_forward(g_out.buf(), g_tokens.buf(), g_table.buf(), with_pos ? g_pos.buf() : none(), N,
                              T, C);
      expect_close(g_out, ref, t == F32 ? kExact : tol(t), "out");
    }
  }
}

TEST_CASE("cuda embedding_forward gives a NaN row for a negative token id", "[cuda][embedding]") {
  const int N = 4, T = 4, C = 5;
  const DeviceBuffer tokens(IVec{0, -1, 1, 0});
  const DeviceBuffer table(random_vec(2 * C, 1), F32);
  const DeviceBuffer out(Vec(N * C, 0.0f), F32);
  gpu().embedding_forward(out.buf(), tokens.buf(), table.buf(), none(), N, T, C);
  const Vec got = out.download();
  for (int c = 0; c < C; ++c) {
    CHECK(std::isnan(got[1 * C + c]));
    CHECK_FALSE(std::isnan(got[0 * C + c]));
  }
}

TEST_CASE("cuda embedding: kRowElsewhere gives the position row and is skipped in backward, as on the CPU",
          "[cuda][embedding][tp]") {
  const int N = 6, T = 3, C = 33;
  const IVec tokens{1, ptrain::kernels::kRowElsewhere, 0, ptrain::kernels::kRowElsewhere, 2, 1};
  const Vec table = random_vec(3 * C, 1), pos = random_vec(T * C, 2), d_out = random_vec(N * C, 3);
  const DeviceBuffer g_tokens(tokens), g_table(table, F32), g_pos(pos, F32), g_d_out(d_out, F32);
  for (const bool with_pos : {true, false}) {
    Vec ref = nan_vec(N * C);
    cpu().embedding_forward(buf(ref), buf(tokens), buf(table), with_pos ? buf(pos) : none(), N, T, C);
    const DeviceBuffer g_out(nan_vec(N * C), F32);
    gpu().embedding_forward(g_out.buf(), g_tokens.buf(), g_table.buf(), with_pos ? g_pos.buf() : none(), N, T,
                            C);
    expect_close(g_out, ref, kExact, "out");
  }
  Vec d_table(3 * C, 0.0f), d_pos(T * C, 0.0f);
  cpu().embedding_backward(buf(d_table), buf(d_pos), buf(d_out), buf(tokens), N, T, C);
  const DeviceBuffer g_d_table(Vec(3 * C, 0.0f), F32), g_d_pos(Vec(T * C, 0.0f), F32);
  gpu().embedding_backward(g_d_table.buf(), g_d_pos.buf(), g_d_out.buf(), g_tokens.buf(), N, T, C);
  expect_close(g_d_table, d_table, kExact, "d_table");
  expect_close(g_d_pos, d_pos, kExact, "d_positions");
}

TEST_CASE("cuda embedding_backward equals the CPU's sums bit for bit (deterministic)",
          "[cuda][embedding][grad]") {
  struct Case {
    int B, T, C, V;
  };
  // Many repeats; N = 5000 with 7 ids (long runs, several radix-sort tiles); few repeats, wide rows.
  for (const Case c : {Case{5, 7, 67, 11}, Case{50, 100, 33, 7}, Case{3, 4, 300, 1000}}) {
    const int N = c.B * c.T;
    const IVec tokens = random_ints(N, 4, 0, c.V - 1);
    const DeviceBuffer g_tokens(tokens);
    for (const DType dy_type : {F32, BF16}) {
      INFO("B=" << c.B << " T=" << c.T << " C=" << c.C << " V=" << c.V << " d_out=" << to_string(dy_type));
      const Vec dy = as_dtype(random_vec(N * c.C, 5), dy_type);
      const Vec dt0 = random_vec(c.V * c.C, 6), dp0 = random_vec(c.T * c.C, 7);
      Vec ref_dt = dt0, ref_dp = dp0;
      cpu().embedding_backward(buf(ref_dt), buf(ref_dp), buf(dy), buf(tokens), N, c.T, c.C);
      const DeviceBuffer g_dy(dy, dy_type), g_dt(dt0, F32), g_dp(dp0, F32);
      gpu().embedding_backward(g_dt.buf(), g_dp.buf(), g_dy.buf(), g_tokens.buf(), N, c.T, c.C);
      expect_close(g_dt, ref_dt, kExact, "d_table");
      expect_close(g_dp, ref_dp, kExact, "d_positions");

      // Each gradient alone, BF16 storage (one rounding of the fp32 sum).
      const Vec dt0_b = as_dtype(dt0, BF16), dp0_b = as_dtype(dp0, BF16);
      Vec ref_dt_b = dt0_b, ref_dp_b = dp0_b;
      cpu().embedding_backward(buf(ref_dt_b), none(), buf(dy), buf(tokens), N, c.T, c.C);
      cpu().embedding_backward(none(), buf(ref_dp_b), buf(dy), buf(tokens), N, c.T, c.C);
      const DeviceBuffer g_dt_b(dt0_b, BF16), g_dp_b(dp0_b, BF16);
      gpu().embedding_backward(g_dt_b.buf(), none(), g_dy.buf(), g_tokens.buf(), N, c.T, c.C);
      gpu().embedding_backward(none(), g_dp_b.buf(), g_dy.buf(), g_tokens.buf(), N, c.T, c.C);
      expect_close(g_dt_b, ref_dt_b, tol(BF16), "bf16 d_table alone");
      expect_close(g_dp_b, ref_dp_b, tol(BF16), "bf16 d_positions alone");
    }
  }
}

// ------------------------------------------------------------------ norms

namespace {

struct NormTypes {
  DType x, w, g;  // activations, weight/bias, parameter gradients
};
constexpr NormTypes kNormTypes[] = {{F32, F32, F32}, {BF16, BF16, F32}, {BF16, F32, BF16}};
constexpr std::pair<int, int> kNormShapes[] = {{37, 67}, {37, 1000}, {3, 4099}};

}  // namespace

TEST_CASE("cuda layernorm_forward and layernorm_backward match the CPU", "[cuda][layernorm][grad]") {
  for (const auto& [N, C] : kNormShapes) {
    for (const NormTypes nt : kNormTypes) {
      INFO("N=" << N << " C=" << C << " x=" << to_string(nt.x) << " w=" << to_string(nt.w)
                << " grads=" << to_string(nt.g));
      const float eps = 1e-5f;
      const Vec x = as_dtype(random_vec(N * C, 1, -2.0f, 3.0f), nt.x);
      const Vec w = as_dtype(random_vec(C, 2, 0.5f, 1.5f), nt.w);
      const Vec b = as_dtype(random_vec(C, 3), nt.w);
      Vec ref_out = nan_vec(N * C), mean = nan_vec(N), rstd = nan_vec(N);
      cpu().layernorm_forward(buf(ref_out), buf(mean), buf(rstd), buf(x), buf(w), buf(b), N, C, eps);

      const DeviceBuffer g_x(x, nt.x), g_w(w, nt.w), g_b(b, nt.w);
      const DeviceBuffer g_out(nan_vec(N * C), nt.x), g_mean(nan_vec(N), F32), g_rstd(nan_vec(N), F32);
      gpu().layernorm_forward(g_out.buf(), g_mean.buf(), g_rstd.buf(), g_x.buf(), g_w.buf(), g_b.buf(), N, C,
                              eps);
      expect_close(g_out, ref_out, tol(nt.x), "out");
      expect_close(g_mean, mean, tol(F32), "mean");
      expect_close(g_rstd, rstd, tol(F32), "rstd");

      // Without bias and stats.
      Vec ref_nb = nan_vec(N * C);
      cpu().layernorm_forward(buf(ref_nb), none(), none(), buf(x), buf(w), none(), N, C, eps);
      gpu().layernorm_forward(g_out.buf(), none(), none(), g_x.buf(), g_w.buf(), none(), N, C, eps);
      expect_close(g_out, ref_nb, tol(nt.x), "out without bias");

      // Backward from the CPU's stats: d_in, d_weight and d_bias all accumulate.
      const Vec dy = as_dtype(random_vec(N * C, 4), nt.x);
      const Vec din0 = as_dtype(random_vec(N * C, 5), nt.x);
      const Vec dw0 = as_dtype(random_vec(C, 6), nt.g), db0 = as_dtype(random_vec(C, 7), nt.g);
      Vec ref_din = din0, ref_dw = dw0, ref_db = db0;
      cpu().layernorm_backward(buf(ref_din), buf(ref_dw), buf(ref_db), buf(dy), buf(x), buf(w), buf(mean),
                               buf(rstd), N, C);
      const DeviceBuffer g_dy(dy, nt.x), g_din(din0, nt.x), g_dw(dw0, nt.g), g_db(db0, nt.g);
      const DeviceBuffer s_mean(mean, F32), s_rstd(rstd, F32);
      gpu().layernorm_backward(g_din.buf(), g_dw.buf(), g_db.buf(), g_dy.buf(), g_x.buf(), g_w.buf(),
                               s_mean.buf(), s_rstd.buf(), N, C);
      expect_close(g_din, ref_din, tol(nt.x, 2e-5), "d_in (accumulated)");
      expect_close(g_dw, ref_dw, tol(nt.g, 5e-5), "d_weight (accumulated)");
      expect_close(g_db, ref_db, tol(nt.g, 5e-5), "d_bias (accumulated)");

      // d_bias alone, twice from the same start: bitwise the same (no atomics).
      const DeviceBuffer r1(db0, nt.g), r2(db0, nt.g);
      gpu().layernorm_backward(none(), none(), r1.buf(), g_dy.buf(), g_x.buf(), g_w.buf(), s_mean.buf(),
                               s_rstd.buf(), N, C);
      gpu().layernorm_backward(none(), none(), r2.buf(), g_dy.buf(), g_x.buf(), g_w.buf(), s_mean.buf(),
                               s_rstd.buf(), N, C);
      expect_close(r1, r2.download(), kExact, "d_bias reproducible");
      expect_close(r1, ref_db, tol(nt.g, 5e-5), "d_bias alone");
    }
  }
}

TEST_CASE("cuda rmsnorm_forward and rmsnorm_backward match the CPU", "[cuda][rmsnorm][grad]") {
  for (const auto& [N, C] : kNormShapes) {
    for (const NormTypes nt : kNormTypes) {
      INFO("N=" << N << " C=" << C << " x=" << to_string(nt.x) << " w=" << to_string(nt.w)
                << " grads=" << to_string(nt.g));
      const float eps = 1e-6f;
      const Vec x = as_dtype(random_vec(N * C, 21, -2.0f, 3.0f), nt.x);
      const Vec w = as_dtype(random_vec(C, 22, 0.5f, 1.5f), nt.w);
      Vec ref_out = nan_vec(N * C), rstd = nan_vec(N);
      cpu().rmsnorm_forward(buf(ref_out), buf(rstd), buf(x), buf(w), N, C, eps);

      const DeviceBuffer g_x(x, nt.x), g_w(w, nt.w);
      const DeviceBuffer g_out(nan_vec(N * C), nt.x), g_rstd(nan_vec(N), F32);
      gpu().rmsnorm_forward(g_out.buf(), g_rstd.buf(), g_x.buf(), g_w.buf(), N, C, eps);
      expect_close(g_out, ref_out, tol(nt.x), "out");
      expect_close(g_rstd, rstd, tol(F32), "rstd");

      const Vec dy = as_dtype(random_vec(N * C, 24), nt.x);
      const Vec din0 = as_dtype(random_vec(N * C, 25), nt.x);
      const Vec dw0 = as_dtype(random_vec(C, 26), nt.g);
      Vec ref_din = din0, ref_dw = dw0;
      cpu().rmsnorm_backward(buf(ref_din), buf(ref_dw), buf(dy), buf(x), buf(w), buf(rstd), N, C);
      const DeviceBuffer g_dy(dy, nt.x), g_din(din0, nt.x), g_dw(dw0, nt.g), s_rstd(rstd, F32);
      gpu().rmsnorm_backward(g_din.buf(), g_dw.buf(), g_dy.buf(), g_x.buf(), g_w.buf(), s_rstd.buf(), N, C);
      expect_close(g_din, ref_din, tol(nt.x, 2e-5), "d_in (accumulated)");
      expect_close(g_dw, ref_dw, tol(nt.g, 5e-5), "d_weight (accumulated)");

      // d_weight alone accumulates once more.
      Vec ref_dw2 = ref_dw;
      cpu().rmsnorm_backward(none(), buf(ref_dw2), buf(dy), buf(x), buf(w), buf(rstd), N, C);
      gpu().rmsnorm_backward(none(), g_dw.buf(), g_dy.buf(), g_x.buf(), g_w.buf(), s_rstd.buf(), N, C);
      expect_close(g_dw, ref_dw2, tol(nt.g, 1e-4), "d_weight accumulated twice");
    }
  }
}

// ------------------------------------------------------------------ residual add + norm

namespace {

// One fused call's device operands, outputs poisoned; x_out is its own buffer or a's or b's.
struct DeviceAddNorm {
  DeviceBuffer a, b, x, out, mean, rstd;
  XOut x_out;
  const DeviceBuffer& sum() const { return x_out == XOut::AliasA ? a : x_out == XOut::AliasB ? b : x; }
};

DeviceAddNorm device_add_norm(const Vec& a, const Vec& b, DType t, int N, XOut x_out) {
  const auto n = a.size();
  return {DeviceBuffer(a, t),
          DeviceBuffer(b, t),
          DeviceBuffer(nan_vec(n), t),
          DeviceBuffer(nan_vec(n), t),
          DeviceBuffer(nan_vec(N), F32),
          DeviceBuffer(nan_vec(N), F32),
          x_out};
}

}  // namespace

// Against the CPU op in the same storage types (host bf16 where the device has BF16: the sum is rounded
// before the norm on both), and bit for bit against the device's own add then norm.
TEST_CASE("cuda add_layernorm_forward matches the CPU and the unfused device ops",
          "[cuda][layernorm][add_norm]") {
  const float eps = 1e-5f;
  for (const auto& [N, C] : kNormShapes) {
    for (const NormTypes nt : kNormTypes) {
      for (const XOut x_out : kXOuts) {
        for (const bool optional : {true, false}) {  // mean, rstd and bias given, or all null
          INFO("N=" << N << " C=" << C << " x=" << to_string(nt.x) << " w=" << to_string(nt.w) << " x_out "
                    << to_string(x_out) << " mean/rstd/bias=" << optional);
          const Vec a = random_vec(N * C, 41, -2.0f, 3.0f), b = random_vec(N * C, 42, -1.5f, 1.0f);
          const Vec w = random_vec(C, 43, 0.5f, 1.5f), bias = random_vec(C, 44);
          HostTensor ha(a, nt.x), hb(b, nt.x), hx(nan_vec(N * C), nt.x), hout(nan_vec(N * C), nt.x);
          HostTensor hw(w, nt.w), hbias(bias, nt.w);
          Vec ref_mean = nan_vec(N), ref_rstd = nan_vec(N);
          cpu().add_layernorm_forward(hx.buf(), hout.buf(), optional ? buf(ref_mean) : none(),
                                      optional ? buf(ref_rstd) : none(), ha.buf(), hb.buf(), hw.buf(),
                                      optional ? hbias.buf() : none(), N, C, eps);

          const DeviceBuffer g_w(w, nt.w), g_bias(bias, nt.w);
          const Buf g_bias_opt = optional ? g_bias.buf() : none();
          const DeviceAddNorm f = device_add_norm(a, b, nt.x, N, x_out);
          gpu().add_layernorm_forward(f.sum().buf(), f.out.buf(), optional ? f.mean.buf() : none(),
                                      optional ? f.rstd.buf() : none(), f.a.buf(), f.b.buf(), g_w.buf(),
                                      g_bias_opt, N, C, eps);
          expect_close(f.sum(), hx.values(), kExact, "x_out");  // one fp32 add, rounded alike
          expect_close(f.out, hout.values(), tol(nt.x), "out");
          if (optional) {  // else both stay poisoned
            expect_close(f.mean, ref_mean, tol(F32), "mean");
            expect_close(f.rstd, ref_rstd, tol(F32), "rstd");
          }

          const DeviceAddNorm u = device_add_norm(a, b, nt.x, N, XOut::Separate);
          gpu().add(u.x.buf(), u.a.buf(), u.b.buf(), std::int64_t{N} * C);
          gpu().layernorm_forward(u.out.buf(), optional ? u.mean.buf() : none(),
                                  optional ? u.rstd.buf() : none(), u.x.buf(), g_w.buf(), g_bias_opt, N, C,
                                  eps);
          expect_close(f.out, u.out.download(), kExact, "out, as add then layernorm_forward");
          if (optional) {
            expect_close(f.mean, u.mean.download(), kExact, "mean, as add then layernorm_forward");
            expect_close(f.rstd, u.rstd.download(), kExact, "rstd, as add then layernorm_forward");
          }
        }
      }
    }
  }
}

TEST_CASE("cuda add_rmsnorm_forward matches the CPU and the unfused device ops",
          "[cuda][rmsnorm][add_norm]") {
  const float eps = 1e-6f;
  for (const auto& [N, C] : kNormShapes) {
    for (const NormTypes nt : kNormTypes) {
      for (const XOut x_out : kXOuts) {
        for (const bool with_rstd : {true, false}) {
          INFO("N=" << N << " C=" << C << " x=" << to_string(nt.x) << " w=" << to_string(nt.w) << " x_out "
                    << to_string(x_out) << " rstd=" << with_rstd);
          const Vec a = random_vec(N * C, 51, -2.0f, 3.0f), b = random_vec(N * C, 52, -1.5f, 1.0f);
          const Vec w = random_vec(C, 53, 0.5f, 1.5f);
          HostTensor ha(a, nt.x), hb(b, nt.x), hx(nan_vec(N * C), nt.x), hout(nan_vec(N * C), nt.x);
          HostTensor hw(w, nt.w);
          Vec ref_rstd = nan_vec(N);
          cpu().add_rmsnorm_forward(hx.buf(), hout.buf(), with_rstd ? buf(ref_rstd) : none(), ha.buf(),
                                    hb.buf(), hw.buf(), N, C, eps);

          const DeviceBuffer g_w(w, nt.w);
          const DeviceAddNorm f = device_add_norm(a, b, nt.x, N, x_out);
          gpu().add_rmsnorm_forward(f.sum().buf(), f.out.buf(), with_rstd ? f.rstd.buf() : none(), f.a.buf(),
                                    f.b.buf(), g_w.buf(), N, C, eps);
          expect_close(f.sum(), hx.values(), kExact, "x_out");
          expect_close(f.out, hout.values(), tol(nt.x), "out");
          if (with_rstd) expect_close(f.rstd, ref_rstd, tol(F32), "rstd");

          const DeviceAddNorm u = device_add_norm(a, b, nt.x, N, XOut::Separate);
          gpu().add(u.x.buf(), u.a.buf(), u.b.buf(), std::int64_t{N} * C);
          gpu().rmsnorm_forward(u.out.buf(), with_rstd ? u.rstd.buf() : none(), u.x.buf(), g_w.buf(), N, C,
                                eps);
          expect_close(f.out, u.out.download(), kExact, "out, as add then rmsnorm_forward");
          if (with_rstd) expect_close(f.rstd, u.rstd.download(), kExact, "rstd, as add then rmsnorm_forward");
        }
      }
    }
  }
}

// ------------------------------------------------------------------ rope

TEST_CASE("cuda rope_forward and rope_backward match the CPU", "[cuda][rope]") {
  struct Case {
    int B, T, H, D, pos0;
    float theta;
  };
  for (const Case c : {Case{2, 5, 3, 14, 3, 10000.0f}, Case{1, 37, 2, 128, 1000, 500000.0f},
                       Case{2, 9, 5, 64, 0, 10000.0f}, Case{1, 3, 1, 2, 7, 10000.0f}}) {
    for (const DType t : {F32, BF16}) {
      INFO("B=" << c.B << " T=" << c.T << " H=" << c.H << " D=" << c.D << " pos0=" << c.pos0
                << " dtype=" << to_string(t));
      const Vec x = as_dtype(random_vec(c.B * c.T * c.H * c.D, 1), t);
      Vec ref = x;
      cpu().rope_forward(buf(ref), c.B, c.T, c.H, c.D, c.theta, c.pos0);
      const DeviceBuffer g(x, t);
      gpu().rope_forward(g.buf(), c.B, c.T, c.H, c.D, c.theta, c.pos0);
      expect_close(g, ref, tol(t, 1e-6), "forward");

      Vec ref_b = x;
      cpu().rope_backward(buf(ref_b), c.B, c.T, c.H, c.D, c.theta, c.pos0);
      const DeviceBuffer gb(x, t);
      gpu().rope_backward(gb.buf(), c.B, c.T, c.H, c.D, c.theta, c.pos0);
      expect_close(gb, ref_b, tol(t, 1e-6), "backward");
    }
  }
}

// ------------------------------------------------------------------ activations

TEST_CASE("cuda gelu and swiglu match the CPU, in place too", "[cuda][activations]") {
  const std::int64_t n = 100003;
  for (const DType t : {F32, BF16}) {
    INFO("dtype=" << to_string(t));
    const Vec x = as_dtype(random_vec(n, 1, -6.0f, 6.0f), t);
    const Vec up = as_dtype(random_vec(n, 2, -2.0f, 2.0f), t);
    const Vec dy = as_dtype(random_vec(n, 3), t);
    const DeviceBuffer g_x(x, t), g_up(up, t), g_dy(dy, t);

    Vec ref = nan_vec(n);
    cpu().gelu_forward(buf(ref), buf(x), n);
    const DeviceBuffer out(nan_vec(n), t);
    gpu().gelu_forward(out.buf(), g_x.buf(), n);
    expect_close(out, ref, tol(t), "gelu_forward");
    const DeviceBuffer in_place(x, t);
    gpu().gelu_forward(in_place.buf(), in_place.buf(), n);
    expect_close(in_place, ref, tol(t), "gelu_forward in place");

    Vec ref_dx = nan_vec(n);
    cpu().gelu_backward(buf(ref_dx), buf(dy), buf(x), n);
    const DeviceBuffer dx(nan_vec(n), t);
    gpu().gelu_backward(dx.buf(), g_dy.buf(), g_x.buf(), n);
    expect_close(dx, ref_dx, tol(t), "gelu_backward");
    const DeviceBuffer dx_in_place(dy, t);
    gpu().gelu_backward(dx_in_place.buf(), dx_in_place.buf(), g_x.buf(), n);
    expect_close(dx_in_place, ref_dx, tol(t), "gelu_backward, d_in aliasing d_out");

    Vec ref_s = nan_vec(n);
    cpu().swiglu_forward(buf(ref_s), buf(x), buf(up), n);
    const DeviceBuffer s(nan_vec(n), t);
    gpu().swiglu_forward(s.buf(), g_x.buf(), g_up.buf(), n);
    expect_close(s, ref_s, tol(t), "swiglu_forward");

    Vec ref_dg = nan_vec(n), ref_du = nan_vec(n);
    cpu().swiglu_backward(buf(ref_dg), buf(ref_du), buf(dy), buf(x), buf(up), n);
    const DeviceBuffer dg(nan_vec(n), t), du(nan_vec(n), t);
    gpu().swiglu_backward(dg.buf(), du.buf(), g_dy.buf(), g_x.buf(), g_up.buf(), n);
    expect_close(dg, ref_dg, tol(t), "swiglu_backward d_gate");
    expect_close(du, ref_du, tol(t), "swiglu_backward d_up");
    const DeviceBuffer dg_alias(dy, t), du2(nan_vec(n), t);
    gpu().swiglu_backward(dg_alias.buf(), du2.buf(), dg_alias.buf(), g_x.buf(), g_up.buf(), n);
    expect_close(dg_alias, ref_dg, tol(t), "swiglu_backward, d_gate aliasing d_out");
    expect_close(du2, ref_du, tol(t), "swiglu_backward d_up (aliased call)");
  }
}

// ------------------------------------------------------------------ mixture of experts

TEST_CASE("cuda moe ops match the CPU: routing exactly, dispatch and combine in both dtypes", "[cuda][moe]") {
  const int B = 3, T = 37, E = 8, k = 2, capacity = 7, C = 45;  // capacity drops some choices
  const int N = B * T, R = E * B * capacity;
  const Vec logits = random_vec(static_cast<std::size_t>(N) * E, 21, -3.0f, 3.0f);
  Vec probs = nan_vec(logits.size()), weight = nan_vec(N * k), counts = nan_vec(B * E);
  IVec choice(N * k, 99), slot(N * k, 99);
  cpu().moe_route(buf(probs), buf(choice), buf(weight), buf(slot), buf(counts), buf(logits), B, T, E, k,
                  capacity, 0, E);
  const DeviceBuffer g_logits(logits, F32), g_probs(nan_vec(logits.size()), F32),
      g_weight(nan_vec(N * k), F32), g_counts(nan_vec(B * E), F32), g_choice(IVec(N * k, 99)),
      g_slot(IVec(N * k, 99));
  gpu().moe_route(g_probs.buf(), g_choice.buf(), g_weight.buf(), g_slot.buf(), g_counts.buf(), g_logits.buf(),
                  B, T, E, k, capacity, 0, E);
  expect_close(g_probs, probs, tol(F32), "moe_route probs");
  expect_close(g_weight, weight, tol(F32), "moe_route weight");
  CHECK(g_choice.download_ints() == choice);
  CHECK(g_slot.download_ints() == slot);
  expect_close(g_counts, counts, kExact, "moe_route counts");
  const DeviceBuffer in_place(logits, F32);  // probs aliasing logits
  gpu().moe_route(in_place.buf(), g_choice.buf(), g_weight.buf(), g_slot.buf(), g_counts.buf(),
                  in_place.buf(), B, T, E, k, capacity, 0, E);
  expect_close(in_place, probs, tol(F32), "moe_route in place");
  IVec local_slot(N * k, 99);  // the buffer of experts 3..5
  Vec scratch_probs = nan_vec(logits.size());
  cpu().moe_route(buf(scratch_probs), buf(choice), buf(weight), buf(local_slot), buf(counts), buf(logits), B,
                  T, E, k, capacity, 3, 3);
  const DeviceBuffer g_local_slot(IVec(N * k, 99));
  gpu().moe_route(g_probs.buf(), g_choice.buf(), g_weight.buf(), g_local_slot.buf(), g_counts.buf(),
                  g_logits.buf(), B, T, E, k, capacity, 3, 3);
  CHECK(g_local_slot.download_ints() == local_slot);

  const Vec d_weight = random_vec(N * k, 22);
  const DeviceBuffer g_dw(d_weight, F32);
  for (const DType t : {F32, BF16}) {
    INFO("dtype=" << to_string(t));
    Vec ref_dl = nan_vec(logits.size());
    cpu().moe_route_backward(buf(ref_dl), buf(d_weight), buf(probs), buf(choice), buf(weight), buf(counts), B,
                             T, E, k, 0.3f);
    const DeviceBuffer dl(nan_vec(logits.size()), t);
    gpu().moe_route_backward(dl.buf(), g_dw.buf(), g_probs.buf(), g_choice.buf(), g_weight.buf(),
                             g_counts.buf(), B, T, E, k, 0.3f);
    expect_close(dl, as_dtype(ref_dl, t), tol(t), "moe_route_backward");

    const Vec x = as_dtype(random_vec(static_cast<std::size_t>(N) * C, 23), t);
    const Vec rows = as_dtype(random_vec(static_cast<std::size_t>(R) * C, 24), t);
    const DeviceBuffer g_x(x, t), g_rows(rows, t);
    Vec ref_scatter = nan_vec(rows.size()), ref_dw = nan_vec(N * k);
    cpu().moe_scatter(buf(ref_scatter), buf(ref_dw), buf(x), buf(rows), buf(slot), buf(weight), N, k, R, C);
    const DeviceBuffer scattered(nan_vec(rows.size()), t), dw(nan_vec(N * k), F32);
    gpu().moe_scatter(scattered.buf(), dw.buf(), g_x.buf(), g_rows.buf(), g_slot.buf(), g_weight.buf(), N, k,
                      R, C);
    expect_close(scattered, as_dtype(ref_scatter, t), tol(t), "moe_scatter rows");
    expect_close(dw, ref_dw, tol(F32, 1e-4), "moe_scatter d_weight");
    Vec ref_plain = nan_vec(rows.size());
    cpu().moe_scatter(buf(ref_plain), none(), buf(x), none(), buf(slot), none(), N, k, R, C);
    const DeviceBuffer plain(nan_vec(rows.size()), t);
    gpu().moe_scatter(plain.buf(), Buf{}, g_x.buf(), Buf{}, g_slot.buf(), Buf{}, N, k, R, C);
    expect_close(plain, ref_plain, kExact, "moe_scatter without weights (copies)");

    Vec ref_out = nan_vec(x.size());
    cpu().moe_combine(buf(ref_out), buf(rows), buf(slot), buf(weight), N, k, C);
    const DeviceBuffer out(nan_vec(x.size()), t);
    gpu().moe_combine(out.buf(), g_rows.buf(), g_slot.buf(), g_weight.buf(), N, k, C);
    expect_close(out, as_dtype(ref_out, t), tol(t), "moe_combine");
  }
}

// ------------------------------------------------------------------ elementwise

TEST_CASE("cuda add, accumulate, scale and fill match the CPU", "[cuda][elementwise]") {
  const std::int64_t n = 100003;
  for (const DType t : {F32, BF16}) {
    INFO("dtype=" << to_string(t));
    const Tol exact_or_bf16 = t == F32 ? kExact : tol(t);
    const Vec a = as_dtype(random_vec(n, 1), t), b = as_dtype(random_vec(n, 2), t);
    Vec ref = nan_vec(n);
    cpu().add(buf(ref), buf(a), buf(b), n);
    const DeviceBuffer g_a(a, t), g_b(b, t), out(nan_vec(n), t);
    gpu().add(out.buf(), g_a.buf(), g_b.buf(), n);
    expect_close(out, ref, exact_or_bf16, "add");
    const DeviceBuffer aliased(a, t);
    gpu().add(aliased.buf(), aliased.buf(), g_b.buf(), n);
    expect_close(aliased, ref, exact_or_bf16, "add, out aliasing a");

    Vec ref_s = a;
    cpu().scale(buf(ref_s), 0.37f, n);
    const DeviceBuffer s(a, t);
    gpu().scale(s.buf(), 0.37f, n);
    expect_close(s, ref_s, exact_or_bf16, "scale");

    const DeviceBuffer f(nan_vec(n), t);
    gpu().fill(f.buf(), 1.25f, n);
    expect_close(f, Vec(n, 1.25f), kExact, "fill");
  }
  for (const DType acc_t : {F32, BF16}) {
    for (const DType x_t : {F32, BF16}) {
      for (const std::int64_t m : {n, std::int64_t{100000}}) {  // element by element; 16-byte Packs
        INFO("acc=" << to_string(acc_t) << " x=" << to_string(x_t) << " n=" << m);
        const Vec acc0 = as_dtype(random_vec(m, 3), acc_t), x = as_dtype(random_vec(m, 4), x_t);
        Vec ref = acc0;
        cpu().accumulate(buf(ref), buf(x), m);
        const DeviceBuffer g_acc(acc0, acc_t), g_x(x, x_t);
        gpu().accumulate(g_acc.buf(), g_x.buf(), m);
        expect_close(g_acc, ref, acc_t == F32 ? kExact : tol(acc_t), "accumulate");
      }
    }
  }
}

TEST_CASE("cuda fill_normal draws the CPU's normals bit for bit, rows and one long row", "[cuda][fill_normal]") {
  const std::uint64_t key = 0x9E3779B97F4A7C15ull;
  // One long row from an index past 2^32 (the counter's high word), and a tp rank's columns of a
  // weight: 517 rows of 301 from column 1000 of 4096 (the seed's and the tensor's largest shapes are
  // no different to the kernel).
  for (const auto& [rows, cols, first, stride] :
       {std::tuple<std::int64_t, std::int64_t, std::uint64_t, std::uint64_t>{1, 1000003, (1ull << 32) - 5, 0},
        {517, 301, 1000, 4096}}) {
    INFO("rows=" << rows << " cols=" << cols);
    const std::int64_t n = rows * cols;
    Vec ref = nan_vec(static_cast<std::size_t>(n));
    cpu().fill_normal(buf(ref), rows, cols, key, first, stride, 0.02f);
    const DeviceBuffer got(nan_vec(static_cast<std::size_t>(n)), F32);
    gpu().fill_normal(got.buf(), rows, cols, key, first, stride, 0.02f);
    const Vec host = got.download();
    CHECK(std::memcmp(host.data(), ref.data(), ref.size() * sizeof(float)) == 0);
  }
  const DeviceBuffer bf(nan_vec(4), BF16);
  REQUIRE_THROWS_WITH(gpu().fill_normal(bf.buf(), 1, 4, key, 0, 0, 1.0f), Contains("cuda fill_normal"));
}

TEST_CASE("cuda convert matches the CPU bit for bit in every direction", "[cuda][elementwise][convert]") {
  for (const std::int64_t n : {std::int64_t{13}, std::int64_t{100003}}) {
    Vec x = random_vec(static_cast<std::size_t>(n), 1, -100.0f, 100.0f);
    // Ties to even (down and up), overflow to inf, infinities, signed zero, a subnormal.
    const float inf = std::numeric_limits<float>::infinity(), max = std::numeric_limits<float>::max();
    const Vec specials = {1.00390625f, 1.01171875f, max, inf, -inf, -0.0f, 1e-40f};
    std::copy(specials.begin(), specials.end(), x.begin());
    for (const DType src : {F32, BF16}) {
      for (const DType dst : {F32, BF16}) {
        INFO("n=" << n << " src=" << to_string(src) << " dst=" << to_string(dst));
        const Vec values = as_dtype(x, src);
        const Vec ref = as_dtype(values, dst);  // what the CPU convert gives (convert_test.cpp)
        const DeviceBuffer g_src(values, src), g_dst(nan_vec(values.size()), dst);
        gpu().convert(g_dst.buf(), g_src.buf(), n);
        const Vec got = g_dst.download();
        CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);  // infinities, -0 too
      }
    }
  }
  // NaN stays NaN.
  const DeviceBuffer nan_src(nan_vec(3), F32), nan_dst(Vec(3, 0.0f), BF16);
  gpu().convert(nan_dst.buf(), nan_src.buf(), 3);
  for (const float v : nan_dst.download()) CHECK(std::isnan(v));
  const DeviceBuffer fa(random_vec(4, 1), F32), ia(IVec(4, 0));
  REQUIRE_THROWS_WITH(gpu().convert(ia.buf(), fa.buf(), 4), Contains("cuda convert") && Contains("'dst'"));
  REQUIRE_THROWS_WITH(gpu().convert(fa.buf(), ia.buf(), 4), Contains("cuda convert") && Contains("'src'"));
}

// ------------------------------------------------------------------ cross-entropy

TEST_CASE("cuda vocab-parallel cross-entropy passes match the CPU", "[cuda][cross_entropy][tp]") {
  // V = 1001 over shards of Vs columns: the last of 4 x 256 holds 233 real ones, of 3 x 512 none.
  for (const auto& [Vs, shards] : {std::pair{256, 4}, std::pair{512, 3}}) {
    for (const DType t : {F32, BF16}) {
      const int N = 9, V = 1001;
      INFO("Vs=" << Vs << " shards=" << shards << " dtype=" << to_string(t));
      IVec targets = random_ints(N, 4, 0, V - 1);
      targets[2] = -1;  // ignored row
      std::vector<Vec> logits;
      Vec all_stats(static_cast<std::size_t>(shards) * N * 3), stats(static_cast<std::size_t>(N) * 3);
      const DeviceBuffer g_targets(targets);
      for (int r = 0; r < shards; ++r) {
        logits.push_back(as_dtype(random_vec(static_cast<std::size_t>(N) * Vs, 10 + r, -4.0f, 4.0f), t));
        cpu().cross_entropy_shard_stats(buf(stats), buf(logits[r]), buf(targets), N, V, Vs, r);
        const DeviceBuffer g_logits(logits[r], t), g_stats(nan_vec(stats.size()), F32);
        gpu().cross_entropy_shard_stats(g_stats.buf(), g_logits.buf(), g_targets.buf(), N, V, Vs, r);
        expect_close(g_stats, stats, Tol{1e-6, 1e-5}, "stats");
        std::copy(stats.begin(), stats.end(), all_stats.begin() + static_cast<std::ptrdiff_t>(r) * N * 3);
      }
      const DeviceBuffer g_all(all_stats, F32);
      for (int r = 0; r < shards; ++r) {
        Vec loss = nan_vec(N), dl = nan_vec(logits[r].size());
        cpu().cross_entropy_shard_forward_backward(buf(loss), buf(dl), buf(logits[r]), buf(all_stats),
                                                   buf(targets), N, V, Vs, r, shards, 0.5f);
        const DeviceBuffer g_logits(logits[r], t), g_loss(nan_vec(N), F32), g_dl(nan_vec(dl.size()), t);
        gpu().cross_entropy_shard_forward_backward(g_loss.buf(), g_dl.buf(), g_logits.buf(), g_all.buf(),
                                                   g_targets.buf(), N, V, Vs, r, shards, 0.5f);
        expect_close(g_loss, loss, Tol{1e-4, 1e-5}, "losses");
        expect_close(g_dl, dl, t == F32 ? Tol{1e-8, 1e-5} : Tol{1e-6, 1e-2}, "d_logits");
      }
    }
  }
}

TEST_CASE("cuda cross_entropy_forward_backward matches the CPU", "[cuda][cross_entropy]") {
  struct Case {
    int N, V, Vp;
    DType t;
    bool grad, alias;
  };
  for (const Case c : {Case{13, 1001, 1024, F32, true, false}, Case{13, 1001, 1024, F32, false, false},
                       Case{13, 1001, 1024, F32, true, true}, Case{7, 333, 333, F32, true, false},
                       Case{13, 1001, 1024, BF16, true, false}, Case{13, 1001, 1024, BF16, true, true},
                       Case{3, 50257, 50304, F32, true, false}, Case{3, 50257, 50304, BF16, true, true},
                       Case{5, 31, 37, BF16, false, false},
                       Case{4, 1, 3, F32, true, false}}) {
    INFO("N=" << c.N << " V=" << c.V << " Vp=" << c.Vp << " dtype=" << to_string(c.t) << " grad=" << c.grad
              << " alias=" << c.alias);
    const Vec logits = as_dtype(random_vec(static_cast<std::size_t>(c.N) * c.Vp, 1, -4.0f, 4.0f), c.t);
    IVec targets = random_ints(c.N, 2, 0, c.V - 1);
    targets[1] = -1;  // ignored row
    const float grad_scale = 1.0f / static_cast<float>(c.N);
    Vec ref_loss = nan_vec(c.N), ref_dl = nan_vec(logits.size());
    cpu().cross_entropy_forward_backward(buf(ref_loss), c.grad ? buf(ref_dl) : none(), buf(logits),
                                         buf(targets), c.N, c.V, c.Vp, grad_scale);

    const DeviceBuffer g_logits(logits, c.t), g_targets(targets), g_loss(nan_vec(c.N), F32);
    const DeviceBuffer g_dl(nan_vec(logits.size()), c.t);
    const Buf dl = !c.grad ? none() : (c.alias ? g_logits.buf() : g_dl.buf());
    gpu().cross_entropy_forward_backward(g_loss.buf(), dl, g_logits.buf(), g_targets.buf(), c.N, c.V, c.Vp,
                                         grad_scale);
    expect_close(g_loss, ref_loss, Tol{1e-4, 1e-5}, "losses");
    if (c.grad) {
      const Tol t = c.t == F32 ? Tol{1e-8, 1e-5} : Tol{1e-6, 1e-2};
      expect_close(c.alias ? g_logits : g_dl, ref_dl, t, "d_logits");
    }
  }
}

TEST_CASE(
    "cuda cross_entropy_forward_backward reports a target >= V at the next read back, and keeps working",
    "[cuda][cross_entropy][errors]") {
  const int N = 5, V = 29, Vp = 32;
  const Vec logits = random_vec(N * Vp, 1);
  IVec targets = random_ints(N, 2, 0, V - 1);
  const DeviceBuffer g_logits(logits, F32), g_loss(nan_vec(N), F32), g_dl(nan_vec(N * Vp), F32);
  targets[3] = V;
  targets[4] = V + 5;
  const DeviceBuffer bad(targets);
  // The call does not wait for the kernel; the row gets a NaN loss and the next copy_to_host throws,
  // naming the lowest bad row over both calls, and only once.
  gpu().cross_entropy_forward_backward(g_loss.buf(), g_dl.buf(), g_logits.buf(), bad.buf(), N, V, Vp, 1.0f);
  gpu().cross_entropy_forward_backward(g_loss.buf(), none(), g_logits.buf(), bad.buf(), N, V, Vp, 1.0f);
  Vec host(N);
  REQUIRE_THROWS_WITH(gpu().copy_to_host(host.data(), g_loss.buf(), N * sizeof(float)),
                      Contains("cross_entropy_forward_backward") && Contains("target 29 at row 3 >= V"));
  CHECK(std::isnan(g_loss.download()[3]));
  REQUIRE_NOTHROW(gpu().copy_to_host(host.data(), g_loss.buf(), N * sizeof(float)));
  targets[3] = 0;
  targets[4] = 1;
  const DeviceBuffer good(targets);
  Vec ref_loss = nan_vec(N);
  cpu().cross_entropy_forward_backward(buf(ref_loss), none(), buf(logits), buf(targets), N, V, Vp, 1.0f);
  gpu().cross_entropy_forward_backward(g_loss.buf(), none(), g_logits.buf(), good.buf(), N, V, Vp, 1.0f);
  REQUIRE_NOTHROW(gpu().copy_to_host(host.data(), g_loss.buf(), N * sizeof(float)));
  expect_close(g_loss, ref_loss, Tol{1e-4, 1e-5}, "losses after the error");
}

// ------------------------------------------------------------------ optimizer and reductions

TEST_CASE("cuda adamw_step matches the CPU", "[cuda][adamw]") {
  const std::int64_t n = 100003;
  const Vec p0 = random_vec(n, 1), g = random_vec(n, 2), m0 = random_vec(n, 3, -0.1f, 0.1f);
  const Vec v0 = random_vec(n, 4, 0.0f, 0.01f);
  for (const int step : {1, 7}) {
    INFO("step=" << step);
    Vec p = p0, m = m0, v = v0;
    cpu().adamw_step(buf(p), buf(g), buf(m), buf(v), Buf{}, n, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f});
    const DeviceBuffer gp(p0, F32), gg(g, F32), gm(m0, F32), gv(v0, F32);
    gpu().adamw_step(gp.buf(), gg.buf(), gm.buf(), gv.buf(), Buf{}, n, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f});
    expect_close(gp, p, Tol{1e-6, 1e-5}, "param");
    expect_close(gm, m, Tol{1e-7, 1e-5}, "m");
    expect_close(gv, v, Tol{1e-9, 1e-5}, "v");
  }
  // The clip's gradient scale and the bf16 working copy written in the same pass.
  Vec p = p0, m = m0, v = v0;
  const AdamWStep scaled{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.37f};
  cpu().adamw_step(buf(p), buf(g), buf(m), buf(v), Buf{}, n, scaled);
  const DeviceBuffer gp(p0, F32), gg(g, F32), gm(m0, F32), gv(v0, F32), copy(nan_vec(n), BF16);
  gpu().adamw_step(gp.buf(), gg.buf(), gm.buf(), gv.buf(), copy.buf(), n, scaled);
  expect_close(gp, p, Tol{1e-6, 1e-5}, "param, scaled");
  expect_close(gm, m, Tol{1e-7, 1e-5}, "m, scaled");
  expect_close(copy, as_dtype(gp.download(), BF16), kExact, "the bf16 copy of the device's update");
}

TEST_CASE("cuda sum and sum_squares match the CPU, in device memory", "[cuda][reduce]") {
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}, std::int64_t{1000003}}) {
    for (const DType t : {F32, BF16}) {
      INFO("n=" << n << " dtype=" << to_string(t));
      const Vec x =
          as_dtype(random_vec(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), 1, -2.0f, 2.0f), t);
      const DeviceBuffer g(x, t);
      float ref[2] = {0, 0};
      cpu().sum(scalar(ref[0]), buf(x), n);
      cpu().sum_squares(scalar(ref[1]), buf(x), n);
      const DeviceBuffer out(nan_vec(4), F32);
      gpu().sum(out.at(0), g.buf(), n);
      gpu().sum_squares(out.at(1), g.buf(), n);
      gpu().sum(out.at(2), g.buf(), n);
      gpu().sum_squares(out.at(3), g.buf(), n);
      Vec got(4);
      gpu().copy_to_host(got.data(), out.buf(), sizeof(float) * 4);  // read back together, once
      // Both sum in double and round once: equal but for a double-rounding tie.
      CHECK(got[0] == Approx(ref[0]).epsilon(1e-7).margin(1e-6));
      CHECK(got[1] == Approx(ref[1]).epsilon(1e-7));
      CHECK(got[2] == got[0]);  // deterministic
      CHECK(got[3] == got[1]);
    }
  }
}

TEST_CASE("cuda abs_max and fp8_round equal the CPU's FP8 emulation bit for bit", "[cuda][fp8]") {
  // The amax is a max (exact whatever the order); the rounding is the hardware's cvt.rn.satfinite,
  // which kernels/fp8.h matches on every float (fp8_nvidia_test): both equal, bit for bit.
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{1000003}}) {
    for (const DType t : {F32, BF16}) {
      for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        INFO("n=" << n << " dtype=" << to_string(t) << " format=" << to_string(format));
        Vec x = as_dtype(random_vec(static_cast<std::size_t>(n), 9, -0.03f, 0.03f), t);
        x[0] = -0.75f;  // the amax, and values far below it that fall into the subnormals
        float ref_amax = 0;
        cpu().abs_max(scalar(ref_amax), buf(x), n, false);
        HostTensor host(x, t), host_out(Vec(x.size(), 0.0f), t);
        cpu().fp8_round(host_out.buf(), host.buf(), scalar(ref_amax), n, format);
        const DeviceBuffer g(x, t), out(Vec(x.size(), 0.0f), t), amax(Vec{5.0f, 0.0f}, F32);
        gpu().abs_max(amax.at(0), g.buf(), n, false);
        gpu().abs_max(amax.at(1), g.buf(), n, true);  // combined with the 0 it held
        gpu().fp8_round(out.buf(), g.buf(), amax.at(0), n, format);
        const Vec got_amax = amax.download();
        CHECK(got_amax[0] == ref_amax);
        CHECK(got_amax[1] == ref_amax);
        expect_close(out, host_out.values(), kExact, "fp8_round");
      }
    }
  }
  const DeviceBuffer with_nan(Vec{1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f}, F32), amax(1, F32);
  gpu().abs_max(amax.buf(), with_nan.buf(), 3, false);
  CHECK(std::isnan(amax.download()[0]));
}
