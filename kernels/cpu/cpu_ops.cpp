// CpuOps: the Ops interface over the kernels in kernels/cpu/ (one file per op family, each entry
// checking its arguments). Stateless; cpu_ops() hands out one immutable instance.
//
// Threads: GEMMs run on OpenBLAS's own pool, every other kernel on OpenMP's. The two pools take
// turns (no kernel calls BLAS inside a parallel region), so they must be the same size, the cores
// this rank owns: the engine calls set_cpu_threads(n) (kernels/cpu/threads.h), which sets both
// openblas_set_num_threads(n) and omp_set_num_threads(n), once at start-up. Kernels never set
// thread counts themselves. With several ranks per node, n = cores / local ranks. Spinning idle
// threads of one pool slow the other; OMP_WAIT_POLICY=passive helps when the two alternate often.
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

namespace ptrain::kernels {
namespace {

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::Cpu; }

  void linear_forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) const override {
    cpu::linear_forward(out, in, weight, bias, M, N, K);
  }
  void linear_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N,
                       int K) const override {
    cpu::linear_backward(d_in, d_weight, d_bias, d_out, in, weight, M, N, K);
  }
  void linear_gelu_forward(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N,
                           int K) const override {
    cpu::linear_gelu_forward(out, pre, in, weight, bias, M, N, K);
  }
  void linear_input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K) const override {
    cpu::linear_input_grad_add(d_in, d_out, weight, M, N, K);
  }
  void linear_backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf pre,
                            int M, int N, int K) const override {
    cpu::linear_backward_gelu(d_pre, d_weight, d_bias, d_out, in, weight, pre, M, N, K);
  }

  void embedding_forward(Buf out, Buf tokens, Buf table, Buf positions, int N, int T, int C) const override {
    cpu::embedding_forward(out, tokens, table, positions, N, T, C);
  }
  void embedding_backward(Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N, int T,
                          int C) const override {
    cpu::embedding_backward(d_table, d_positions, d_out, tokens, N, T, C);
  }

  void layernorm_forward(Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias, int N, int C,
                         float eps, Buf amax) const override {
    cpu::layernorm_forward(out, mean, rstd, in, weight, bias, N, C, eps, amax);
  }
  void layernorm_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf mean,
                          Buf rstd, int N, int C) const override {
    cpu::layernorm_backward(d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, N, C);
  }
  void rmsnorm_forward(Buf out, Buf rstd, Buf in, Buf weight, int N, int C, float eps,
                       Buf amax) const override {
    cpu::rmsnorm_forward(out, rstd, in, weight, N, C, eps, amax);
  }
  void rmsnorm_backward(Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight, Buf rstd, int N,
                        int C) const override {
    cpu::rmsnorm_backward(d_in, d_weight, d_out, in, weight, rstd, N, C);
  }
  void add_layernorm_forward(Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b, Buf weight, Buf bias,
                             int N, int C, float eps, Buf amax) const override {
    cpu::add_layernorm_forward(x_out, out, mean, rstd, a, b, weight, bias, N, C, eps, amax);
  }
  void add_rmsnorm_forward(Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight, int N, int C,
                           float eps, Buf amax) const override {
    cpu::add_rmsnorm_forward(x_out, out, rstd, a, b, weight, N, C, eps, amax);
  }

  void rope_forward(Buf x, int B, int T, int H, int D, float theta, int pos0) const override {
    cpu::rope_forward(x, B, T, H, D, theta, pos0);
  }
  void rope_backward(Buf d_x, int B, int T, int H, int D, float theta, int pos0) const override {
    cpu::rope_backward(d_x, B, T, H, D, theta, pos0);
  }

  void attention_forward(Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& s) const override {
    cpu::attention_forward(out, lse, q, k, v, s);
  }
  void attention_backward(Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                          const AttentionShape& s) const override {
    cpu::attention_backward(d_q, d_k, d_v, d_out, q, k, v, out, lse, s);
  }
  void attention_merge(Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H, int D) const override {
    cpu::attention_merge(out, lse, part, part_lse, B, T, H, D);
  }

  void gelu_forward(Buf out, Buf in, std::int64_t n, Buf amax) const override {
    cpu::gelu_forward(out, in, n, amax);
  }
  void gelu_backward(Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax) const override {
    cpu::gelu_backward(d_in, d_out, in, n, amax);
  }
  void swiglu_forward(Buf out, Buf gate, Buf up, std::int64_t n, Buf amax) const override {
    cpu::swiglu_forward(out, gate, up, n, amax);
  }
  void swiglu_backward(Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up, std::int64_t n,
                       Buf amax) const override {
    cpu::swiglu_backward(d_gate, d_up, d_out, gate, up, n, amax);
  }

  void add(Buf out, Buf a, Buf b, std::int64_t n) const override { cpu::add(out, a, b, n); }
  void accumulate(Buf acc, Buf x, std::int64_t n) const override { cpu::accumulate(acc, x, n); }
  void scale(Buf x, float factor, std::int64_t n) const override { cpu::scale(x, factor, n); }
  void fill(Buf x, float value, std::int64_t n) const override { cpu::fill(x, value, n); }
  void fill_normal(Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key, std::uint64_t first,
                   std::uint64_t row_stride, float stddev) const override {
    cpu::fill_normal(x, rows, cols, key, first, row_stride, stddev);
  }
  void convert(Buf dst, Buf src, std::int64_t n) const override { cpu::convert(dst, src, n); }

  void cross_entropy_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf targets, int N, int V, int Vp,
                                      float grad_scale) const override {
    cpu::cross_entropy_forward_backward(losses, d_logits, logits, targets, N, V, Vp, grad_scale);
  }
  void cross_entropy_shard_stats(Buf stats, Buf logits, Buf targets, int N, int V, int Vs,
                                 int shard) const override {
    cpu::cross_entropy_shard_stats(stats, logits, targets, N, V, Vs, shard);
  }
  void cross_entropy_shard_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf all_stats, Buf targets,
                                            int N, int V, int Vs, int shard, int shards,
                                            float grad_scale) const override {
    cpu::cross_entropy_shard_forward_backward(losses, d_logits, logits, all_stats, targets, N, V, Vs, shard,
                                              shards, grad_scale);
  }

  void moe_route(Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits, int B, int T, int E,
                 int k, int capacity, int first_expert, int experts_here) const override {
    cpu::moe_route(probs, choice, weight, slot, counts, logits, B, T, E, k, capacity, first_expert,
                   experts_here);
  }
  void moe_route_backward(Buf d_logits, Buf d_weight, Buf probs, Buf choice, Buf weight, Buf counts, int B,
                          int T, int E, int k, float aux_scale) const override {
    cpu::moe_route_backward(d_logits, d_weight, probs, choice, weight, counts, B, T, E, k, aux_scale);
  }
  void moe_scatter(Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight, int N, int k, int R,
                   int C) const override {
    cpu::moe_scatter(rows, d_weight, x, src, slot, weight, N, k, R, C);
  }
  void moe_combine(Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C) const override {
    cpu::moe_combine(out, rows, slot, weight, N, k, C);
  }

  void adamw_step(Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n,
                  const AdamWStep& s) const override {
    cpu::adamw_step(param, grad, m, v, param_out, n, s);
  }
  void sum(Buf out, Buf x, std::int64_t n) const override { cpu::sum(out, x, n); }
  void sum_squares(Buf out, Buf x, std::int64_t n) const override { cpu::sum_squares(out, x, n); }
  void abs_max(Buf amax, Buf x, std::int64_t n, bool combine) const override { cpu::abs_max(amax, x, n, combine); }
  void fp8_round(Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format) const override {
    cpu::fp8_round(out, x, amax, n, format);
  }
  void fp8_cast(Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax, std::int64_t rows,
                std::int64_t cols) const override {
    cpu::fp8_cast(out, out_t, inv_scale, record, x, amax, rows, cols);
  }
  void fp8_gemm(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N, int K,
                bool accumulate, Fp8Sums /*the CPU sums in FP32 either way*/) const override {
    cpu::fp8_gemm(out, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, accumulate);
  }
  void fp8_gemm_gelu(Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N,
                     int K, Fp8Sums /*as fp8_gemm's*/, Buf amax) const override {
    cpu::fp8_gemm_gelu(out, pre, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, amax);
  }

  void* allocate(std::size_t bytes) const override { return cpu::allocate(bytes); }
  void release(void* ptr) const override { std::free(ptr); }
  void copy_to_device(Buf dst, const void* host, std::size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst.ptr, host, bytes);
  }
  void copy_to_host(void* host, Buf src, std::size_t bytes) const override {
    if (bytes > 0) std::memcpy(host, src.ptr, bytes);
  }
  void copy(Buf dst, Buf src, std::size_t bytes) const override {
    if (bytes > 0) std::memmove(dst.ptr, src.ptr, bytes);
  }
  void copy_rows(Buf dst, std::size_t dst_pitch, Buf src, std::size_t src_pitch, std::size_t width,
                 std::size_t rows) const override {
    auto* to = static_cast<std::byte*>(dst.ptr);
    const auto* from = static_cast<const std::byte*>(src.ptr);
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(to + r * dst_pitch, from + r * src_pitch, width);
  }
};

}  // namespace

const Ops& cpu_ops() {
  static const CpuOps ops;
  return ops;
}

}  // namespace ptrain::kernels
