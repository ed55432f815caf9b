// CudaOps: the Ops interface over the CUDA kernels in kernels/cuda/ (one file per op family, each
// entry checking its arguments), plus the state they share (LaunchContext), created on first use.
// Attention comes from kernels/cuda/attention.cuh and attention_merge.cuh.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_merge.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#ifdef PTRAIN_HAVE_CUDNN
#include "kernels/cuda/cudnn_attention.h"
#endif
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/pinned_uploads.cuh"
#include "kernels/cuda/markers.cuh"
#include "kernels/cuda/side_uploads.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels {
namespace {

using cuda::LaunchContext;

constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;

// Releases what a (possibly half-built) context holds; errors are ignored (cleanup after a failure).
void destroy_context(const LaunchContext& c) noexcept {
  if (c.bad_target_host != nullptr) static_cast<void>(cudaFreeHost(c.bad_target_host));
  if (c.bad_target != nullptr) static_cast<void>(cudaFree(c.bad_target));
  if (c.scratch_pool != nullptr) static_cast<void>(cudaMemPoolDestroy(c.scratch_pool));
  if (c.lt_workspace != nullptr) static_cast<void>(cudaFree(c.lt_workspace));
  if (c.lt != nullptr) static_cast<void>(cublasLtDestroy(c.lt));
  if (c.stream != nullptr) static_cast<void>(cudaStreamDestroy(c.stream));
}

LaunchContext create_context(int device) {
  LaunchContext c;
  try {
    PTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    PTRAIN_CUDA_CHECK(cublasLtCreate(&c.lt));
    PTRAIN_CUDA_CHECK(cudaMalloc(&c.lt_workspace, kLtWorkspaceBytes));
    c.lt_workspace_bytes = kLtWorkspaceBytes;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    PTRAIN_CUDA_CHECK(cudaMemPoolCreate(&c.scratch_pool, &props));
    // Keep freed blocks for reuse: temporaries are allocated every step and are small.
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    PTRAIN_CUDA_CHECK(cudaMemPoolSetAttribute(c.scratch_pool, cudaMemPoolAttrReleaseThreshold, &keep));
    PTRAIN_CUDA_CHECK(cudaMalloc(&c.bad_target, sizeof(unsigned long long)));
    PTRAIN_CUDA_CHECK(cudaMemsetAsync(c.bad_target, 0xff, sizeof(unsigned long long), c.stream));  // none
    PTRAIN_CUDA_CHECK(cudaMallocHost(&c.bad_target_host, sizeof(unsigned long long)));
    *c.bad_target_host = ~0ull;
  } catch (...) {
    destroy_context(c);
    throw;
  }
  return c;
}

class CudaOps final : public Ops {
 public:
  Device device() const override { return Device::Cuda; }

  // The shared state, created on first use, for the device current then.
  const LaunchContext& ctx() const {
    std::call_once(once_, [this] {
      int device = 0;
      PTRAIN_CUDA_CHECK(cudaGetDevice(&device));
      PTRAIN_CUDA_CHECK(cudaFree(nullptr));  // creates the runtime's context: the baseline includes it
      baseline_used_ = used_bytes();
      ctx_ = create_context(device);
      device_ = device;
    });
    int current = -1;
    PTRAIN_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) {
      throw std::runtime_error("cuda_ops() is bound to device " + std::to_string(device_) +
                               " (current at its first use) but device " + std::to_string(current) +
                               " is current now");
    }
    return ctx_;
  }

  void linear_forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) const override {
    cuda::linear_forward(ctx(), out, in, weight, bias, M, N, K);
  }
  void linear_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N,
                       int K) const override {
    cuda::linear_backward(ctx(), d_in, d_weight, d_bias, d_out, in, weight, M, N, K);
  }
  void linear_gelu_forward(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N,
                           int K) const override {
    cuda::linear_gelu_forward(ctx(), out, pre, in, weight, bias, M, N, K);
  }
  void linear_input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K) const override {
    cuda::linear_input_grad_add(ctx(), d_in, d_out, weight, M, N, K);
  }
  void linear_backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf pre,
                            int M, int N, int K) const override {
    cuda::linear_backward_gelu(ctx(), d_pre, d_weight, d_bias, d_out, in, weight, pre, M, N, K);
  }

  void embedding_forward(Buf out, Buf tokens, Buf table, Buf positions, int N, int T, int C) const override {
    cuda::embedding_forward(ctx(), out, tokens, table, positions, N, T, C);
  }
  void embedding_backward(Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N, int T,
                          int C) const override {
    cuda::embedding_backward(ctx(), d_table, d_positions, d_out, tokens, N, T, C);
  }

  void layernorm_forward(Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias, int N, int C, float eps,
                         Buf amax) const override {
    cuda::layernorm_forward(ctx(), out, mean, rstd, in, weight, bias, N, C, eps, amax);
  }
  void layernorm_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf mean,
                          Buf rstd, int N, int C) const override {
    cuda::layernorm_backward(ctx(), d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, N, C);
  }
  void rmsnorm_forward(Buf out, Buf rstd, Buf in, Buf weight, int N, int C, float eps,
                       Buf amax) const override {
    cuda::rmsnorm_forward(ctx(), out, rstd, in, weight, N, C, eps, amax);
  }
  void rmsnorm_backward(Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight, Buf rstd, int N,
                        int C) const override {
    cuda::rmsnorm_backward(ctx(), d_in, d_weight, d_out, in, weight, rstd, N, C);
  }
  void add_layernorm_forward(Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b, Buf weight, Buf bias,
                             int N, int C, float eps, Buf amax) const override {
    cuda::add_layernorm_forward(ctx(), x_out, out, mean, rstd, a, b, weight, bias, N, C, eps, amax);
  }
  void add_rmsnorm_forward(Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight, int N, int C, float eps,
                           Buf amax) const override {
    cuda::add_rmsnorm_forward(ctx(), x_out, out, rstd, a, b, weight, N, C, eps, amax);
  }

  void rope_forward(Buf x, int B, int T, int H, int D, float theta, int pos0) const override {
    cuda::rope_forward(ctx(), x, B, T, H, D, theta, pos0);
  }
  void rope_backward(Buf d_x, int B, int T, int H, int D, float theta, int pos0) const override {
    cuda::rope_backward(ctx(), d_x, B, T, H, D, theta, pos0);
  }

  // BF16 attention goes to cuDNN's fused kernels where cuDNN has a plan for the shape, else (and F32)
  // to ptrain's own (cudnn_attention.h).
  void attention_forward(Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& s) const override {
#ifdef PTRAIN_HAVE_CUDNN
    check_attention_forward("cuda", out, lse, q, k, v, s);
    if (cudnn_attention_.forward(ctx(), out, lse, q, k, v, s)) return;
#endif
    cuda::attention_forward(ctx().stream, out, lse, q, k, v, s);
  }
  void attention_backward(Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                          const AttentionShape& s) const override {
#ifdef PTRAIN_HAVE_CUDNN
    check_attention_backward("cuda", d_q, d_k, d_v, d_out, q, k, v, out, lse, s);
    if (cudnn_attention_.backward(ctx(), d_q, d_k, d_v, d_out, q, k, v, out, lse, s)) return;
#endif
    cuda::attention_backward(ctx().stream, d_q, d_k, d_v, d_out, q, k, v, out, lse, s);
  }
  void attention_merge(Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H, int D) const override {
    cuda::attention_merge(ctx().stream, out, lse, part, part_lse, B, T, H, D);
  }

  void gelu_forward(Buf out, Buf in, std::int64_t n, Buf amax) const override {
    cuda::gelu_forward(ctx(), out, in, n, amax);
  }
  void gelu_backward(Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax) const override {
    cuda::gelu_backward(ctx(), d_in, d_out, in, n, amax);
  }
  void swiglu_forward(Buf out, Buf gate, Buf up, std::int64_t n, Buf amax) const override {
    cuda::swiglu_forward(ctx(), out, gate, up, n, amax);
  }
  void swiglu_backward(Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up, std::int64_t n,
                       Buf amax) const override {
    cuda::swiglu_backward(ctx(), d_gate, d_up, d_out, gate, up, n, amax);
  }

  void add(Buf out, Buf a, Buf b, std::int64_t n) const override { cuda::add(ctx(), out, a, b, n); }
  void accumulate(Buf acc, Buf x, std::int64_t n) const override { cuda::accumulate(ctx(), acc, x, n); }
  void scale(Buf x, float factor, std::int64_t n) const override { cuda::scale(ctx(), x, factor, n); }
  void fill(Buf x, float value, std::int64_t n) const override { cuda::fill(ctx(), x, value, n); }
  void fill_normal(Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key, std::uint64_t first,
                   std::uint64_t row_stride, float stddev) const override {
    cuda::fill_normal(ctx(), x, rows, cols, key, first, row_stride, stddev);
  }
  void convert(Buf dst, Buf src, std::int64_t n) const override { cuda::convert(ctx(), dst, src, n); }

  void cross_entropy_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf targets, int N, int V, int Vp,
                                      float grad_scale) const override {
    cuda::cross_entropy_forward_backward(ctx(), losses, d_logits, logits, targets, N, V, Vp, grad_scale);
  }
  void cross_entropy_shard_stats(Buf stats, Buf logits, Buf targets, int N, int V, int Vs,
                                 int shard) const override {
    cuda::cross_entropy_shard_stats(ctx(), stats, logits, targets, N, V, Vs, shard);
  }
  void cross_entropy_shard_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf all_stats, Buf targets,
                                            int N, int V, int Vs, int shard, int shards,
                                            float grad_scale) const override {
    cuda::cross_entropy_shard_forward_backward(ctx(), losses, d_logits, logits, all_stats, targets, N, V, Vs,
                                               shard, shards, grad_scale);
  }

  void moe_route(Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits, int B, int T, int E,
                 int k, int capacity, int first_expert, int experts_here) const override {
    cuda::moe_route(ctx(), probs, choice, weight, slot, counts, logits, B, T, E, k, capacity, first_expert,
                    experts_here);
  }
  void moe_route_backward(Buf d_logits, Buf d_weight, Buf probs, Buf choice, Buf weight, Buf counts, int B,
                          int T, int E, int k, float aux_scale) const override {
    cuda::moe_route_backward(ctx(), d_logits, d_weight, probs, choice, weight, counts, B, T, E, k, aux_scale);
  }
  void moe_scatter(Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight, int N, int k, int R,
                   int C) const override {
    cuda::moe_scatter(ctx(), rows, d_weight, x, src, slot, weight, N, k, R, C);
  }
  void moe_combine(Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C) const override {
    cuda::moe_combine(ctx(), out, rows, slot, weight, N, k, C);
  }

  void adamw_step(Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n,
                  const AdamWStep& s) const override {
    cuda::adamw_step(ctx(), param, grad, m, v, param_out, n, s);
  }
  void sum(Buf out, Buf x, std::int64_t n) const override { cuda::sum(ctx(), out, x, n); }
  void sum_squares(Buf out, Buf x, std::int64_t n) const override { cuda::sum_squares(ctx(), out, x, n); }
  void abs_max(Buf amax, Buf x, std::int64_t n, bool combine) const override {
    cuda::abs_max(ctx(), amax, x, n, combine);
  }
  void fp8_round(Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format) const override {
    cuda::fp8_round(ctx(), out, x, amax, n, format);
  }
  void fp8_cast(Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax, std::int64_t rows,
                std::int64_t cols) const override {
    cuda::fp8_cast(ctx(), out, out_t, inv_scale, record, x, amax, rows, cols);
  }
  void fp8_gemm(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N, int K,
                bool accumulate, Fp8Sums sums) const override {
    cuda::fp8_gemm(ctx(), out, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, accumulate, sums);
  }
  void fp8_gemm_gelu(Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N,
                     int K, Fp8Sums sums, Buf amax) const override {
    cuda::fp8_gemm_gelu(ctx(), out, pre, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, sums, amax);
  }

  // Allocation happens while a job is set up, never inside a step: plain cudaMalloc, zeroed in
  // stream order so later ops see zeros.
  void* allocate(std::size_t bytes) const override {
    const LaunchContext& c = ctx();
    void* p = nullptr;
    PTRAIN_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
    PTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, std::max<std::size_t>(bytes, 1), c.stream));
    return p;
  }
  void release(void* ptr) const override {
    if (ptr == nullptr) return;
    PTRAIN_CUDA_CHECK(cudaStreamSynchronize(ctx().stream));  // nothing queued may still use it
    PTRAIN_CUDA_CHECK(cudaFree(ptr));
  }
  void copy_to_device(Buf dst, const void* host, std::size_t bytes) const override {
    if (bytes == 0) return;
    uploads_.copy(ctx().stream, dst.ptr, host, bytes);
  }
  // The one place the host waits for the compute stream, so kernels' deferred errors surface here.
  void copy_to_host(void* host, Buf src, std::size_t bytes) const override {
    const LaunchContext& c = ctx();
    if (bytes > 0) PTRAIN_CUDA_CHECK(cudaMemcpyAsync(host, src.ptr, bytes, cudaMemcpyDeviceToHost, c.stream));
    cuda::queue_bad_target_readback(c);
    PTRAIN_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    cuda::throw_if_bad_target(c);
  }
  void copy(Buf dst, Buf src, std::size_t bytes) const override {
    if (bytes == 0) return;
    PTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, ctx().stream));
  }
  void copy_rows(Buf dst, std::size_t dst_pitch, Buf src, std::size_t src_pitch, std::size_t width,
                 std::size_t rows) const override {
    if (width == 0 || rows == 0) return;
    PTRAIN_CUDA_CHECK(cudaMemcpy2DAsync(dst.ptr, dst_pitch, src.ptr, src_pitch, width, rows,
                                        cudaMemcpyDeviceToDevice, ctx().stream));
  }
  void pin_host(void* host, std::size_t bytes) const override {
    if (bytes > 0) PTRAIN_CUDA_CHECK(cudaHostRegister(host, bytes, cudaHostRegisterDefault));
  }
  void unpin_host(void* host) const override {
    static_cast<void>(cudaHostUnregister(host));  // from destructors: never throws
    static_cast<void>(cudaGetLastError());
  }
  std::uint64_t upload_async(Buf dst, const void* host, std::size_t bytes, MarkerSpan* timed) const override {
    if (bytes == 0) return 0;
    return side_uploads_.start(ctx().stream, dst.ptr, host, bytes, timed == nullptr ? nullptr : &markers_, timed);
  }
  void await_upload(std::uint64_t ticket) const override {
    if (ticket != 0) side_uploads_.await(ctx().stream, ticket);
  }
  std::uint64_t record_marker(const void* stream) const override {
    return markers_.record(stream != nullptr ? static_cast<cudaStream_t>(const_cast<void*>(stream)) : ctx().stream);
  }
  double marker_seconds(std::uint64_t from, std::uint64_t to) const override { return markers_.seconds(from, to); }
  void release_marker(std::uint64_t marker) const override { markers_.release(marker); }
  std::optional<std::int64_t> device_bytes_in_use() const override {
    ctx();
    return used_bytes() - baseline_used_;
  }

 private:
  static std::int64_t used_bytes() {
    std::size_t free = 0, total = 0;
    PTRAIN_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<std::int64_t>(total - free);
  }

  mutable cuda::PinnedUploads uploads_;
  mutable cuda::SideUploads side_uploads_;
  mutable cuda::Markers markers_;
#ifdef PTRAIN_HAVE_CUDNN
  mutable cuda::CudnnAttention cudnn_attention_;
#endif
  mutable std::once_flag once_;
  mutable LaunchContext ctx_;
  mutable int device_ = -1;
  mutable std::int64_t baseline_used_ = 0;  // device memory in use before the first op (context)
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // clear the error for later callers
    return 0;
  }
  return count;
}

bool cuda_device_available() { return cuda_device_count() > 0; }

int cuda_compute_capability(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // clear the error for later callers
    return 0;
  }
  return major * 10 + minor;
}

int cuda_select_device(int local_rank) {
  int count = 0;
  PTRAIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 1) throw std::runtime_error("cuda_select_device: no CUDA device is visible");
  const int device = local_rank % count;
  PTRAIN_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

std::string cuda_describe_device(std::map<std::string, std::string>& versions) {
  auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int driver = 0, runtime = 0, device = 0;
  cudaDeviceProp prop{};
  PTRAIN_CUDA_CHECK(cudaDriverGetVersion(&driver));
  PTRAIN_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  PTRAIN_CUDA_CHECK(cudaGetDevice(&device));
  PTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  versions["cuda_driver"] = dotted(driver);
  versions["cuda_runtime"] = dotted(runtime);
  versions["cublaslt"] = std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100) + "." + std::to_string(lt % 100);
  versions["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
#ifdef PTRAIN_HAVE_CUDNN
  // The attention a profile measures is cuDNN's where it serves (cudnn_attention.h).
  try {
    const std::size_t dnn = cuda::cudnn::api().GetVersion();  // major * 10000 + minor * 100 + patch
    versions["cudnn"] = std::to_string(dnn / 10000) + "." + std::to_string(dnn / 100 % 100) + "." +
                        std::to_string(dnn % 100) + " (attention: PTRAIN_CUDNN_ATTENTION=" +
                        to_string(cudnn_attention_mode()) + ")";
  } catch (const std::runtime_error& e) {
    versions["cudnn"] = e.what();
  }
#endif
  return prop.name;
}

const Ops& cuda_ops() {
  // Never destroyed: tearing CUDA objects down during static destruction races the runtime's own
  // shutdown; the driver reclaims everything at process exit. Constructing it touches no CUDA API.
  static const CudaOps& ops = *new CudaOps();
  return ops;
}

cudaStream_t cuda_compute_stream() {
  return static_cast<const CudaOps&>(cuda_ops()).ctx().stream;
}

}  // namespace ptrain::kernels
