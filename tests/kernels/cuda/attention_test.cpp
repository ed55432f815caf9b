// CUDA attention_forward / attention_backward (kernels/cuda/attention.cuh) against the CPU reference
// ops (kernels::cpu_ops()) on random inputs: GQA, MQA and Hq == Hkv, T not a multiple of any tile,
// queries offset into longer keys (context parallelism), queries past the keys (ring attention's
// blocks), head dims 8..256 (including the padded ones), F32 and BF16 (the CPU reference gets the
// bf16-rounded inputs). Every output is poisoned with NaN before the call. Plus determinism, the
// optional lse, and the argument checks. attention_merge (attention_merge.cuh) against the CPU, rows
// that saw no key included, and ring attention's blocks merged against the whole causal attention.
//
// Part of cuda_op_tests (its main exits 77 when there is no CUDA device). Device memory through
// tests/kernels/cuda/device_buffer.h.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_merge.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/ops.h"
#include "tests/kernels/cuda/device_buffer.h"
#include "tests/kernels/kernel_test_util.h"
#ifdef PTRAIN_HAVE_CUDNN
#include <cstdlib>
#include <iterator>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/launch_context.h"
#endif

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

// T query rows; Tk keys (0: T) of which query i sees 0 .. min(pos0 + i, Tk - 1).
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
    // Queries past the keys (pos0 + T > Tk), ring attention's blocks. Full blocks, where every row sees
    // every key: pos0 = Tk (the chunk right after the keys'), pos0 = Tk - 1 (the least full), pos0 far
    // past; Tk off every tile (1, 50, 65, 70, 90, 130), T above and below Tk. Then blocks causal for their
    // first rows and full for the rest, across the 64- and 128-row forward tiles.
    {2, 48, 4, 2, 64, 48, 48},
    {1, 77, 4, 2, 64, 77, 76},
    {1, 100, 6, 1, 128, 70, 5000},
    {2, 33, 2, 2, 80, 130, 130},
    {1, 150, 3, 3, 32, 65, 65},
    {1, 200, 2, 1, 96, 1, 0},  // one key: every row sees it alone
    {1, 1, 2, 1, 8, 9, 9},
    {1, 70, 4, 2, 160, 50, 50},
    {1, 40, 3, 1, 256, 90, 90},
    {2, 64, 2, 1, 224, 64, 63},
    {1, 45, 2, 1, 136, 70, 69},
    {1, 150, 3, 3, 32, 65, 20},    // rows 0 .. 44 causal
    {1, 129, 4, 4, 40, 200, 150},  // rows 0 .. 49 causal, D = 40 on 64-wide tiles
    {2, 100, 4, 2, 128, 90, 10},   // rows 0 .. 79 causal
    {1, 70, 2, 2, 192, 100, 60},   // rows 0 .. 39 causal
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

// The keys no query sees (past the last query's position) get exact zeros; every other key gets a
// gradient (some d_v element not zero).
void check_key_gradients(const Shape& s, const Vec& dk, const Vec& dv) {
  const AttentionShape a = s.op();
  const int last_seen = std::min(a.q_pos0 + a.Tq - 1, a.Tk - 1);
  const std::size_t row = static_cast<std::size_t>(a.Hkv) * a.D;
  for (int b = 0; b < a.B; ++b) {
    for (int j = 0; j < a.Tk; ++j) {
      const auto at = static_cast<std::ptrdiff_t>((static_cast<std::size_t>(b) * a.Tk + j) * row);
      const auto end = at + static_cast<std::ptrdiff_t>(row);
      auto nonzero = [](float x) { return x != 0.0f; };
      const bool any_dk = std::any_of(dk.begin() + at, dk.begin() + end, nonzero);
      const bool any_dv = std::any_of(dv.begin() + at, dv.begin() + end, nonzero);
      INFO("b=" << b << " key " << j << " (last seen " << last_seen << ")");
      if (j > last_seen) {
        REQUIRE_FALSE(any_dk);
        REQUIRE_FALSE(any_dv);
      } else {
        REQUIRE(any_dv);
      }
    }
  }
}

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
    const Vec dk = dev.dk.download(), dv = dev.dv.download();
    check(dk, ref.dk, dtype, "d_k");
    check(dv, ref.dv, dtype, "d_v");
    check_key_gradients(s, dk, dv);
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
  // Queries without keys (queries past the keys are fine: ring attention's blocks).
  REQUIRE_THROWS_WITH(cuda::attention_forward(nullptr, f, f, f, f, f, AttentionShape{1, 4, 0, 3, 2, 1, 8}),
                      Catch::Contains("attention_forward") && Catch::Contains("Tk must be positive"));
  REQUIRE_THROWS_WITH(
      cuda::attention_backward(nullptr, f, f, f, f, f, f, f, f, f, AttentionShape{1, 4, 0, 3, 2, 1, 8}),
      Catch::Contains("attention_backward") && Catch::Contains("Tk must be positive"));
  // attention_merge: mixed F32/BF16, a non-F32 lse, a missing input.
  auto merge = [&](Buf out, Buf lse, Buf part, Buf part_lse) {
    cuda::attention_merge(nullptr, out, lse, part, part_lse, 1, 2, 2, 8);
  };
  REQUIRE_THROWS_WITH(merge(f, f, b16, f), Catch::Contains("attention_merge"));
  REQUIRE_THROWS_AS(merge(f, b16, f, f), std::invalid_argument);
  REQUIRE_THROWS_AS(merge(i32, f, i32, f), std::invalid_argument);
  REQUIRE_THROWS_AS(merge(f, f, f, none), std::invalid_argument);
}

// ---- attention_merge

namespace {

// NaN (the garbage a row holds before it has seen a key, left where neither part saw one) as a
// finite sentinel, so that check_close compares such rows too.
Vec nan_as_sentinel(Vec v) {
  for (float& x : v) {
    if (std::isnan(x)) x = 12345.0f;
  }
  return v;
}

}  // namespace

TEST_CASE("cuda attention_merge matches the CPU, rows that saw no key included", "[cuda][attention][merge]") {
  Stream st;
  const float inf = std::numeric_limits<float>::infinity();
  struct MergeShape {
    int B, T, H, D;
  };
  std::uint32_t seed = 300;
  for (const MergeShape m : {MergeShape{2, 77, 5, 64}, MergeShape{1, 33, 3, 8}, MergeShape{3, 10, 2, 100},
                             MergeShape{1, 130, 4, 256}, MergeShape{1, 4, 2, 0}}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      INFO("B=" << m.B << " T=" << m.T << " H=" << m.H << " D=" << m.D << " " << to_string(dtype));
      const std::size_t n = std::size_t(m.B) * m.T * m.H * m.D, rows = std::size_t(m.B) * m.H * m.T;
      Vec out = as_dtype(random_vec(n, seed += 10), dtype);
      const Vec part = as_dtype(random_vec(n, seed + 1), dtype);
      Vec lse = random_vec(rows, seed + 2, -4.0f, 4.0f), part_lse = random_vec(rows, seed + 3, -4.0f, 4.0f);
      // Row kinds by index (of lse [B, H, T]): out saw no key yet (its garbage is NaN), neither part saw
      // one, the part saw none, out's weight underflows to zero, and plain merges.
      for (std::size_t r = 0; r < rows; ++r) {
        if (r % 5 == 1 || r % 5 == 2) lse[r] = -inf;
        if (r % 5 == 2 || r % 5 == 3) part_lse[r] = -inf;
        if (r % 7 == 4) lse[r] = part_lse[r] - 200.0f;
      }
      for (int b = 0; b < m.B; ++b) {
        for (int t = 0; t < m.T; ++t) {
          for (int h = 0; h < m.H; ++h) {
            if (lse[(std::size_t(b) * m.H + h) * m.T + t] != -inf) continue;
            const std::size_t at = ((std::size_t(b) * m.T + t) * m.H + h) * m.D;
            std::fill_n(out.begin() + std::ptrdiff_t(at), m.D, std::numeric_limits<float>::quiet_NaN());
          }
        }
      }
      DeviceBuffer d_out(out, dtype), d_part(part, dtype), d_lse(lse, DType::F32),
          d_part_lse(part_lse, DType::F32);
      cpu_ops().attention_merge(buf(out), buf(lse), buf(part), buf(part_lse), m.B, m.T, m.H, m.D);
      cuda::attention_merge(st.get(), d_out.buf(), d_lse.buf(), d_part.buf(), d_part_lse.buf(), m.B, m.T, m.H,
                            m.D);
      st.sync();
      const bool bf = dtype == DType::BF16;
      // BF16: the device and the host may round a merged value to neighbouring bf16s.
      check_close(nan_as_sentinel(d_out.download()), nan_as_sentinel(out), bf ? 1e-2 : 1e-6, bf ? 1e-2 : 1e-5,
                  "out");
      check_close(d_lse.download(), lse, 1e-6, 1e-6, "lse");
    }
  }
}

TEST_CASE("cuda attention_merge composes ring attention's blocks into the causal attention",
          "[cuda][attention][merge]") {
  // Queries at positions L .. 2L - 1 over keys 0 .. 2L - 1 (B = 1: each half of the keys is contiguous),
  // as the full block over keys 0 .. L - 1 merged with the diagonal block over keys L .. 2L - 1; the
  // backward of each block with the merged out and lse gives its keys' gradients and its share of d_q.
  Stream st;
  for (const Shape whole : {Shape{1, 77, 4, 2, 64, 154, 77}, Shape{1, 100, 6, 2, 128, 200, 100},
                            Shape{1, 40, 2, 1, 160, 80, 40}}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      const int L = whole.T;
      const Shape full{1, L, whole.Hq, whole.Hkv, whole.D, L, L},
          diagonal{1, L, whole.Hq, whole.Hkv, whole.D, L, 0};
      INFO(whole << " " << to_string(dtype));
      const Host h = random_host(whole, dtype, 400);
      GpuRun ref(whole, h, dtype);
      ref.forward(st, whole);
      ref.backward(st, whole);

      const std::size_t late = full.kv_size();  // keys L .. 2L - 1 start here (16-byte aligned: D % 8 == 0)
      const DeviceBuffer out(output(full.q_size(), dtype)), lse(output(full.lse_size(), DType::F32));
      const DeviceBuffer part(output(full.q_size(), dtype)), part_lse(output(full.lse_size(), DType::F32));
      cuda::attention_forward(st.get(), out.buf(), lse.buf(), ref.q.buf(), ref.k.at(0), ref.v.at(0),
                              full.op());
      cuda::attention_forward(st.get(), part.buf(), part_lse.buf(), ref.q.buf(), ref.k.at(late),
                              ref.v.at(late), diagonal.op());
      cuda::attention_merge(st.get(), out.buf(), lse.buf(), part.buf(), part_lse.buf(), 1, L, whole.Hq,
                            whole.D);
      st.sync();
      check(out.download(), ref.out.download(), dtype, "merged out");
      check(lse.download(), ref.lse.download(), dtype, "merged lse");

      const DeviceBuffer dq_full(output(full.q_size(), dtype)), dq_diag(output(full.q_size(), dtype));
      const DeviceBuffer dk(output(whole.kv_size(), dtype)), dv(output(whole.kv_size(), dtype));
      cuda::attention_backward(st.get(), dq_full.buf(), dk.at(0), dv.at(0), ref.dout.buf(), ref.q.buf(),
                               ref.k.at(0), ref.v.at(0), out.buf(), lse.buf(), full.op());
      cuda::attention_backward(st.get(), dq_diag.buf(), dk.at(late), dv.at(late), ref.dout.buf(), ref.q.buf(),
                               ref.k.at(late), ref.v.at(late), out.buf(), lse.buf(), diagonal.op());
      st.sync();
      check(plus(dq_full.download(), dq_diag.download()), ref.dq.download(), dtype,
            "d_q, summed over the blocks");
      check(dk.download(), ref.dk.download(), dtype, "d_k");
      check(dv.download(), ref.dv.download(), dtype, "d_v");
    }
  }
}

// ---- cuDNN's fused attention (kernels/cuda/cudnn_attention.h), BF16

#ifdef PTRAIN_HAVE_CUDNN
namespace {

// The context the cuDNN path needs: a stream and a pool for its scratch (the device's default pool).
cuda::LaunchContext cudnn_context(const Stream& st) {
  cuda::LaunchContext ctx;
  ctx.stream = st.get();
  PTRAIN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&ctx.scratch_pool, 0));
  return ctx;
}

// Sets PTRAIN_CUDNN_ATTENTION for one scope.
class CudnnMode {
 public:
  explicit CudnnMode(const char* mode) { setenv("PTRAIN_CUDNN_ATTENTION", mode, 1); }
  ~CudnnMode() { unsetenv("PTRAIN_CUDNN_ATTENTION"); }
  CudnnMode(const CudnnMode&) = delete;
  CudnnMode& operator=(const CudnnMode&) = delete;
};

// Every shape of kShapes through cuDNN where it has a plan (declines are allowed, and logged on
// stderr: the own kernels take those); returns how many it served. What it serves matches the CPU as
// closely as the own BF16 kernels must.
int compare_cudnn_with_cpu(const char* mode, std::size_t shapes) {
  const CudnnMode scoped(mode);
  Stream st;
  const cuda::LaunchContext ctx = cudnn_context(st);
  cuda::CudnnAttention cudnn;
  std::uint32_t seed = 900;
  int served = 0;
  for (std::size_t i = 0; i < shapes; ++i) {
    const Shape& s = kShapes[i];
    INFO(s << " cuDNN " << mode);
    const Host h = random_host(s, DType::BF16, seed += 10);
    GpuRun dev(s, h, DType::BF16);
    if (!cudnn.forward(ctx, dev.out.buf(), dev.lse.buf(), dev.q.buf(), dev.k.buf(), dev.v.buf(), s.op()))
      continue;
    REQUIRE(cudnn.backward(ctx, dev.dq.buf(), dev.dk.buf(), dev.dv.buf(), dev.dout.buf(), dev.q.buf(),
                           dev.k.buf(), dev.v.buf(), dev.out.buf(), dev.lse.buf(), s.op()));
    st.sync();
    ++served;
    const Reference ref = cpu_reference(s, h);
    check(dev.out.download(), ref.out, DType::BF16, "out");
    check(dev.lse.download(), ref.lse, DType::BF16, "lse");
    check(dev.dq.download(), ref.dq, DType::BF16, "d_q");
    const Vec dk = dev.dk.download(), dv = dev.dv.download();
    check(dk, ref.dk, DType::BF16, "d_k");
    check(dv, ref.dv, DType::BF16, "d_v");
    check_key_gradients(s, dk, dv);
  }
  WARN("cuDNN (" << mode << ") served " << served << " of " << shapes << " shapes");
  return served;
}

}  // namespace

TEST_CASE("cudnn attention matches the CPU reference where it has a plan", "[cuda][attention][cudnn]") {
  // The shapes training runs (head dims 64 and 128, self-attention and context-parallel chunks) must
  // be served; cuDNN may decline odd head dims and ring attention's blocks.
  CHECK(compare_cudnn_with_cpu("fast", std::size(kShapes)) >= 10);
  // Each shape is a plan cuDNN compiles at run time: the other variant on the first 15 (head dims 8
  // to 256, self-attention and context-parallel chunks).
  CHECK(compare_cudnn_with_cpu("deterministic", 15) >= 5);
}

TEST_CASE("cudnn attention, auto: kept where it runs faster than ours, right on either", "[cuda][attention][cudnn]") {
  const CudnnMode scoped("auto");
  Stream st;
  const cuda::LaunchContext ctx = cudnn_context(st);
  // A shape where cuDNN ran 2.6-3.0x ours on an H100 (profiles/h100-sxm.json against
  // h100-sxm-own-attention.json at T 4096, D 128: a margin that a GPU shared with other tests does
  // not turn over), so auto keeps it on cuDNN; then one of the test shapes, through the op as the
  // engine calls it, right whichever way it went.
  const Shape large{2, 4096, 16, 4, 128};
  const Host h = random_host(large, DType::BF16, 4242);
  GpuRun theirs(large, h, DType::BF16), ours(large, h, DType::BF16);
  cuda::CudnnAttention cudnn;
  CHECK(cudnn.forward(ctx, theirs.out.buf(), theirs.lse.buf(), theirs.q.buf(), theirs.k.buf(), theirs.v.buf(),
                      large.op()));
  CHECK(cudnn.backward(ctx, theirs.dq.buf(), theirs.dk.buf(), theirs.dv.buf(), theirs.dout.buf(),
                       theirs.q.buf(), theirs.k.buf(), theirs.v.buf(), theirs.out.buf(), theirs.lse.buf(),
                       large.op()));
  ours.forward(st, large);
  ours.backward(st, large);
  st.sync();
  check(theirs.out.download(), ours.out.download(), DType::BF16, "out");
  check(theirs.dq.download(), ours.dq.download(), DType::BF16, "d_q");
  check(theirs.dk.download(), ours.dk.download(), DType::BF16, "d_k");
  check(theirs.dv.download(), ours.dv.download(), DType::BF16, "d_v");

  const Shape& small = kShapes[0];
  const Host hs = random_host(small, DType::BF16, 4343);
  GpuRun dev(small, hs, DType::BF16);
  const Ops& ops = cuda_ops();
  ops.attention_forward(dev.out.buf(), dev.lse.buf(), dev.q.buf(), dev.k.buf(), dev.v.buf(), small.op());
  ops.attention_backward(dev.dq.buf(), dev.dk.buf(), dev.dv.buf(), dev.dout.buf(), dev.q.buf(), dev.k.buf(),
                         dev.v.buf(), dev.out.buf(), dev.lse.buf(), small.op());
  const Reference ref = cpu_reference(small, hs);
  check(dev.out.download(), ref.out, DType::BF16, "out");
  check(dev.dq.download(), ref.dq, DType::BF16, "d_q");
  check(dev.dk.download(), ref.dk, DType::BF16, "d_k");
  check(dev.dv.download(), ref.dv, DType::BF16, "d_v");
}

TEST_CASE("cudnn attention: the deterministic backward repeats its bits, off declines",
          "[cuda][attention][cudnn]") {
  Stream st;
  const cuda::LaunchContext ctx = cudnn_context(st);
  cuda::CudnnAttention cudnn;
  const Shape s{2, 256, 8, 2, 128};
  const Host h = random_host(s, DType::BF16, 77);
  GpuRun dev(s, h, DType::BF16);
  {
    const CudnnMode scoped("off");
    CHECK_FALSE(
        cudnn.forward(ctx, dev.out.buf(), dev.lse.buf(), dev.q.buf(), dev.k.buf(), dev.v.buf(), s.op()));
  }
  const CudnnMode scoped("deterministic");
  auto run = [&] {
    REQUIRE(cudnn.forward(ctx, dev.out.buf(), dev.lse.buf(), dev.q.buf(), dev.k.buf(), dev.v.buf(), s.op()));
    REQUIRE(cudnn.backward(ctx, dev.dq.buf(), dev.dk.buf(), dev.dv.buf(), dev.dout.buf(), dev.q.buf(),
                           dev.k.buf(), dev.v.buf(), dev.out.buf(), dev.lse.buf(), s.op()));
    st.sync();
    return std::vector<Vec>{dev.out.download(), dev.dq.download(), dev.dk.download(), dev.dv.download()};
  };
  const std::vector<Vec> first = run();
  poison(dev.out);
  poison(dev.dq);
  poison(dev.dk);
  poison(dev.dv);
  const std::vector<Vec> second = run();
  for (std::size_t i = 0; i < first.size(); ++i) check_close(second[i], first[i], 0.0, 0.0, "repeat");
}
#endif
