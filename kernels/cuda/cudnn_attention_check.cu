// cuDNN attention's first run against ptrain's kernels (see cudnn_attention_check.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cudnn_attention_check.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {
namespace {

// `n` elements of `b` (F32 or BF16) as floats on the host; waits for the stream.
std::vector<float> download(const LaunchContext& ctx, Buf b, std::int64_t n) {
  const std::size_t count = static_cast<std::size_t>(n);
  std::vector<float> host(count);
  if (b.dtype == DType::F32) {
    PTRAIN_CUDA_CHECK(
        cudaMemcpyAsync(host.data(), b.ptr, count * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
    PTRAIN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return host;
  }
  std::vector<std::uint16_t> raw(count);
  PTRAIN_CUDA_CHECK(
      cudaMemcpyAsync(raw.data(), b.ptr, count * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, ctx.stream));
  PTRAIN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  std::transform(raw.begin(), raw.end(), host.begin(), bf16_to_f32);
  return host;
}

// Empty when every element of `got` is within BF16's tolerance of `ref`, else the first that is not.
std::string compare(const char* what, const std::vector<float>& got, const std::vector<float>& ref) {
  double largest = 0.0;
  for (const float r : ref) largest = std::max(largest, static_cast<double>(std::fabs(r)));
  const double floor = 1e-2 * std::max(1.0, largest);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tolerance = floor + 2e-2 * std::fabs(static_cast<double>(ref[i]));
    const double difference = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(difference <= tolerance)) {  // NaN included
      return std::string(what) + "[" + std::to_string(i) + "] is " + std::to_string(got[i]) +
             " where ptrain's is " + std::to_string(ref[i]) + " (tolerance " + std::to_string(tolerance) +
             ")";
    }
  }
  return {};
}

// Each (cuDNN's, ptrain's, element count, name) pair compared, the first disagreement returned;
// then the pool gives back what the reference took.
struct Pair {
  Buf cudnn, own;
  std::int64_t n;
  const char* name;
};
std::string compare_all(const LaunchContext& ctx, const std::vector<Pair>& pairs) {
  std::string failure;
  for (const Pair& p : pairs) {
    if (p.cudnn.ptr == nullptr) continue;
    failure = compare(p.name, download(ctx, p.cudnn, p.n), download(ctx, p.own, p.n));
    if (!failure.empty()) break;
  }
  return failure;
}

void trim_pool(const LaunchContext& ctx) {
  PTRAIN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  PTRAIN_CUDA_CHECK(cudaMemPoolTrimTo(ctx.scratch_pool, 0));
}

}  // namespace

std::string check_attention_forward_against_own(const LaunchContext& ctx, Buf out, Buf lse, Buf q, Buf k,
                                                Buf v, const AttentionShape& s) {
  std::string failure;
  {
    Scratch<bf16> own_out(ctx, static_cast<std::size_t>(s.q_elements()));
    Scratch<float> own_lse(ctx, static_cast<std::size_t>(s.lse_elements()));
    const Buf o{own_out.get(), DType::BF16}, l{own_lse.get(), DType::F32};
    attention_forward(ctx.stream, o, l, q, k, v, s);
    failure = compare_all(ctx, {{out, o, s.q_elements(), "out"}, {lse, l, s.lse_elements(), "lse"}});
  }
  trim_pool(ctx);
  return failure;
}

std::string check_attention_backward_against_own(const LaunchContext& ctx, Buf d_q, Buf d_k, Buf d_v,
                                                 Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                                                 const AttentionShape& s) {
  std::string failure;
  {
    Scratch<bf16> own_dq(ctx, static_cast<std::size_t>(s.q_elements()));
    Scratch<bf16> own_dk(ctx, static_cast<std::size_t>(s.kv_elements()));
    Scratch<bf16> own_dv(ctx, static_cast<std::size_t>(s.kv_elements()));
    const Buf dq{own_dq.get(), DType::BF16}, dk{own_dk.get(), DType::BF16}, dv{own_dv.get(), DType::BF16};
    attention_backward(ctx.stream, dq, dk, dv, d_out, q, k, v, out, lse, s);
    failure = compare_all(ctx, {{d_q, dq, s.q_elements(), "d_q"},
                                {d_k, dk, s.kv_elements(), "d_k"},
                                {d_v, dv, s.kv_elements(), "d_v"}});
  }
  trim_pool(ctx);
  return failure;
}

double time_on_stream(const LaunchContext& ctx, const std::function<void()>& run) {
  struct Event {  // destroyed on every path, a throwing run() included
    cudaEvent_t e = nullptr;
    Event() { PTRAIN_CUDA_CHECK(cudaEventCreate(&e)); }
    ~Event() { static_cast<void>(cudaEventDestroy(e)); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
  } start, end;
  constexpr int kRuns = 3;  // back to back: the host's enqueueing overlaps the GPU's running
  run();
  PTRAIN_CUDA_CHECK(cudaEventRecord(start.e, ctx.stream));
  for (int i = 0; i < kRuns; ++i) run();
  PTRAIN_CUDA_CHECK(cudaEventRecord(end.e, ctx.stream));
  PTRAIN_CUDA_CHECK(cudaEventSynchronize(end.e));
  float ms = 0;
  PTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, end.e));
  return ms / 1e3 / kRuns;
}

double own_attention_forward_seconds(const LaunchContext& ctx, Buf q, Buf k, Buf v, const AttentionShape& s) {
  double seconds = 0;
  {
    Scratch<bf16> own_out(ctx, static_cast<std::size_t>(s.q_elements()));
    Scratch<float> own_lse(ctx, static_cast<std::size_t>(s.lse_elements()));
    const Buf o{own_out.get(), DType::BF16}, l{own_lse.get(), DType::F32};
    seconds = time_on_stream(ctx, [&] { attention_forward(ctx.stream, o, l, q, k, v, s); });
  }
  trim_pool(ctx);
  return seconds;
}

double own_attention_backward_seconds(const LaunchContext& ctx, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                                      const AttentionShape& s) {
  double seconds = 0;
  {
    Scratch<bf16> own_dq(ctx, static_cast<std::size_t>(s.q_elements()));
    Scratch<bf16> own_dk(ctx, static_cast<std::size_t>(s.kv_elements()));
    Scratch<bf16> own_dv(ctx, static_cast<std::size_t>(s.kv_elements()));
    const Buf dq{own_dq.get(), DType::BF16}, dk{own_dk.get(), DType::BF16}, dv{own_dv.get(), DType::BF16};
    seconds = time_on_stream(ctx, [&] { attention_backward(ctx.stream, dq, dk, dv, d_out, q, k, v, out, lse, s); });
  }
  trim_pool(ctx);
  return seconds;
}

}  // namespace ptrain::kernels::cuda
