// CUDA attention_forward / attention_backward (kernels/cuda/attention.cuh) against the CPU reference
// ops (kernels::cpu_ops()) on random inputs: GQA, MQA and Hq == Hkv, T not a multiple of any tile,
// queries offset into longer keys (context parallelism), head dims 8..256 (including the padded ones), F32
// and BF16 (the CPU reference gets the bf16-rounded inputs). Every output is poisoned with NaN before the
// call. Plus determinism, the optional lse, and the argument checks.
//
// Part of cuda_op_tests (its main exits 77 when there is no CUDA device). Device memory through
// tests/kernels/cuda/device_buffer.h.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/ops.h"
#include "tests/kernels/cuda/device_buffer.h"
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels;
using namespace ptrain::kernels::test;

namespace {

// All bits set: NaN in F32 and in BF16.
void poison(const DeviceBuffer& b) {
  const Buf v = b.buf();
  PTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  PTRAIN_CUDA_CHECK(cudaMemset(v.ptr, 0xff, b.size() * dtype_size(v.dtype)));
  PTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
}

// An output buffer, poisoned.
DeviceBuffer output(std::size_t count, DType dtype) {
  DeviceBuffer b(count, dtype);
  poison(b);
  return b;
}

class Stream {
 public:
  Stream() { PTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { static_cast<void>(cudaStreamDestroy(s_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const { PTRAIN_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

// ---- shapes and tolerances

// T query rows; Tk keys (0: T) of which query i sees 0 .. pos0 + i.
struct Shape {
  int B, T, Hq, Hkv, D;
  int Tk = 0, pos0 = 0;
  AttentionShape op() const { return {B, T, Tk > 0 ? Tk : T, pos0, Hq, Hkv, D}; }
  std::size_t q_size() const { return op().q_elements(); }
  std::size_t kv_size() const { return op().kv_elements(); }
  std::size_t lse_size() const { return op().lse_elements(); }
};

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << "B=" << s.B << " T=" << s.T << " Tk=" << s.op().Tk << " pos0=" << s.pos0 << " Hq=" << s.Hq
            << " Hkv=" << s.Hkv << " D=" << s.D;
}

const Shape kShapes[] = {
    {2, 77, 4, 2, 64},    // GQA group 2, T crosses the 32/64 tiles
    {1, 128, 8, 8, 32},   // Hq == Hkv, T a multiple of every tile
    {1, 200, 6, 1, 128},  // MQA (group 6), several tiles of each kind, largest head dim
    {2, 33, 2, 2, 80},    // D = 80, T just past a 32-row tile
    {1, 70, 3, 1, 40},    // D = 40 runs on 64-wide tiles (zero padding)
    {3, 130, 4, 4, 96},   // D = 96
    {1, 1, 2, 1, 8},      // a single token, smallest head dim
    // Head dims above 128 (GPT-3 530B/1T: 160; Gemma: 256): the bf16 kernels split the output columns
    // over two CTAs; 136 and 232 pad to 160 and 256, so the second half is partly padding.
    {2, 77, 4, 2, 160},
    {1, 70, 4, 2, 136},
    {1, 33, 2, 2, 192},
    {1, 65, 3, 1, 224},
    {2, 40, 3, 3, 256},
    {1, 50, 2, 1, 232},
    // Queries offset into longer keys (context parallelism): the last of four chunks; a middle chunk
    // whose later keys no query sees (their d_k, d_v are zero); offsets off every tile boundary.
    {2, 48, 4, 2, 64, 192, 144},
    {2, 40, 4, 2, 64, 160, 0},  // the first chunk: no offset, three quarters of the keys unseen
    {1, 64, 8, 8, 32, 256, 64},
    {1, 37, 6, 1, 128, 200, 45},
    {2, 70, 4, 4, 96, 300, 129},
    {1, 1, 2, 1, 8, 9, 3},
    {1, 37, 4, 2, 200, 100, 45},
};

double max_abs(const Vec& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// |got - ref| <= atol + rtol |ref| with atol = floor * max(1, max |ref|).
void check(const Vec& got, const Vec& ref, DType dtype, const char* what) {
  const bool bf = dtype == DType::BF16;
  const double rtol = bf ? 2e-2 : 1e-4;
  const double floor = bf ? 1e-2 : 2e-5;
  check_close(got, ref, floor * std::max(1.0, max_abs(ref)), rtol, what);
}

struct Host {
  Vec q, k, v, dout;
};

Host random_host(const Shape& s, DType dtype, std::uint32_t seed) {
  Host h{random_vec(s.q_size(), seed, -2.0f, 2.0f), random_vec(s.kv_size(), seed + 1, -2.0f, 2.0f),
         random_vec(s.kv_size(), seed + 2), random_vec(s.q_size(), seed + 3)};
  h.q = as_dtype(std::move(h.q), dtype);  // what the op sees: the CPU reference gets the same values
  h.k = as_dtype(std::move(h.k), dtype);
  h.v = as_dtype(std::move(h.v), dtype);
  h.dout = as_dtype(std::move(h.dout), dtype);
  return h;
}

struct Reference {
  Vec out, lse, dq, dk, dv;
};

Reference cpu_reference(const Shape& s, const Host& h) {
  Reference r{nan_vec(s.q_size()), nan_vec(s.lse_size()), nan_vec(s.q_size()), nan_vec(s.kv_size()),
              nan_vec(s.kv_size())};
  cpu_ops().attention_forward(buf(r.out), buf(r.lse), buf(h.q), buf(h.k), buf(h.v), s.op());
  cpu_ops().attention_backward(buf(r.dq), buf(r.dk), buf(r.dv), buf(h.dout), buf(h.q), buf(h.k), buf(h.v),
                               buf(r.out), buf(r.lse), s.op());
  return r;
}

struct GpuRun {
  DeviceBuffer q, k, v, dout, out, lse, dq, dk, dv;
  GpuRun(const Shape& s, const Host& h, DType dtype)
      : q(h.q, dtype),
        k(h.k, dtype),
        v(h.v, dtype),
        dout(h.dout, dtype),
        out(output(s.q_size(), dtype)),
        lse(output(s.lse_size(), DType::F32)),
        dq(output(s.q_size(), dtype)),
        dk(output(s.kv_size(), dtype)),
        dv(output(s.kv_size(), dtype)) {}

  void forward(const Stream& st, const Shape& s, bool with_lse = true) {
    cuda::attention_forward(st.get(), out.buf(), with_lse ? lse.buf() : Buf{}, q.buf(), k.buf(), v.buf(),
                            s.op());
  }
  void backward(const Stream& st, const Shape& s) {
    cuda::attention_backward(st.get(), dq.buf(), dk.buf(), dv.buf(), dout.buf(), q.buf(), k.buf(), v.buf(),
                             out.buf(), lse.buf(), s.op());
  }
};

void compare_with_cpu(DType dtype) {
  Stream st;
  std::uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    INFO(s << " " << to_string(dtype));
    const Host h = random_host(s, dtype, seed += 10);
    const Reference ref = cpu_reference(s, h);
    GpuRun dev(s, h, dtype);
    dev.forward(st, s);
    st.sync();
    check(dev.out.download(), ref.out, dtype, "out");
    check(dev.lse.download(), ref.lse, dtype, "lse");
    // The backward reads the GPU's own out and lse, as in training.
    dev.backward(st, s);
    st.sync();
    check(dev.dq.download(), ref.dq, dtype, "d_q");
    check(dev.dk.download(), ref.dk, dtype, "d_k");
    check(dev.dv.download(), ref.dv, dtype, "d_v");
  }
}

}  // namespace

TEST_CASE("cuda attention f32 matches the CPU reference", "[cuda][attention]") {
  compare_with_cpu(DType::F32);
}

TEST_CASE("cuda attention bf16 matches the CPU reference on bf16-rounded inputs", "[cuda][attention]") {
  compare_with_cpu(DType::BF16);
}

TEST_CASE("cuda attention is deterministic, overwrites, and lse is optional", "[cuda][attention]") {
  Stream st;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Shape s{2, 77, 4, 2, 64};
    INFO(to_string(dtype));
    const Host h = random_host(s, dtype, 7);
    GpuRun dev(s, h, dtype);
    dev.forward(st, s);
    dev.backward(st, s);
    st.sync();
    const Vec out = dev.out.download(), dq = dev.dq.download(), dk = dev.dk.download(), dv = dev.dv.download();
    // Same call again on poisoned outputs: bitwise the same results (no atomics, no accumulation).
    poison(dev.out);
    poison(dev.dq);
    poison(dev.dk);
    poison(dev.dv);
    dev.forward(st, s, /*with_lse=*/false);  // the lse from the first call stays
    dev.backward(st, s);
    st.sync();
    check_close(dev.out.download(), out, 0.0, 0.0, "out without lse");
    check_close(dev.dq.download(), dq, 0.0, 0.0, "d_q again");
    check_close(dev.dk.download(), dk, 0.0, 0.0, "d_k again");
    check_close(dev.dv.download(), dv, 0.0, 0.0, "d_v again");
  }
}

TEST_CASE("cuda attention rejects bad arguments before launching", "[cuda][attention][errors]") {
  // No kernel runs: these need no device, and the pointers are never dereferenced.
  float dummy[64] = {};
  const Buf f{dummy, DType::F32};
  const Buf b16{dummy, DType::BF16};
  const Buf i32{dummy, DType::I32};
  const Buf none{};
  auto fwd = [&](Buf out, Buf lse, Buf q, Buf k, Buf v, int B, int T, int Hq, int Hkv, int D) {
    cuda::attention_forward(nullptr, out, lse, q, k, v, AttentionShape::self_attention(B, T, Hq, Hkv, D));
  };
  auto bwd = [&](Buf q, Buf lse, int D) {
    cuda::attention_backward(nullptr, q, q, q, q, q, q, q, q, lse,
                             AttentionShape::self_attention(1, 2, 2, 1, D));
  };
  // Hq not a multiple of Hkv; negative sizes; unsupported head dims.
  REQUIRE_THROWS_AS(fwd(f, f, f, f, f, 1, 2, 3, 2, 8), std::invalid_argument);
  REQUIRE_THROWS_AS(fwd(f, f, f, f, f, 1, -2, 2, 1, 8), std::invalid_argument);
  REQUIRE_THROWS_AS(fwd(f, f, f, f, f, 1, 2, 2, 0, 8), std::invalid_argument);
  REQUIRE_THROWS_WITH(fwd(f, f, f, f, f, 1, 2, 2, 1, 20), Catch::Contains("attention_forward") &&
                                                               Catch::Contains("D=20"));
  REQUIRE_THROWS_WITH(fwd(f, f, f, f, f, 1, 2, 2, 1, 264), Catch::Contains("D=264") && Catch::Contains("up to 256"));
  // dtypes: integer inputs, mixed F32/BF16, a non-F32 lse; a missing input.
  REQUIRE_THROWS_AS(fwd(i32, f, i32, i32, i32, 1, 2, 2, 1, 8), std::invalid_argument);
  REQUIRE_THROWS_AS(fwd(f, f, f, b16, f, 1, 2, 2, 1, 8), std::invalid_argument);
  REQUIRE_THROWS_AS(fwd(b16, f, b16, b16, f, 1, 2, 2, 1, 8), std::invalid_argument);
  REQUIRE_THROWS_AS(fwd(f, b16, f, f, f, 1, 2, 2, 1, 8), std::invalid_argument);
  REQUIRE_THROWS_AS(fwd(f, f, f, none, f, 1, 2, 2, 1, 8), std::invalid_argument);
  // Backward: lse is required; a bad head dim names the op.
  REQUIRE_THROWS_AS(bwd(f, none, 8), std::invalid_argument);
  REQUIRE_THROWS_WITH(bwd(f, f, 12), Catch::Contains("attention_backward"));
  // Queries positioned past the keys.
  REQUIRE_THROWS_WITH(cuda::attention_forward(nullptr, f, f, f, f, f, AttentionShape{1, 4, 6, 3, 2, 1, 8}),
                      Catch::Contains("q_pos0 + Tq must not exceed Tk"));
}
