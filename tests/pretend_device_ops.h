// The CPU op set under a device's name: device() says Cuda, so the engine takes its device paths
// (host staging around collectives, copies in and out), while the memory stays host memory that a
// test can inspect. Counts the copies across the pretend host/device boundary, records the size of
// each abs_max pass (which amaxes the engine takes by a pass of their own), counts the FP8 GEMMs by
// how they sum and, when asked, the fp8_casts whose amax is not abs_max of what they cast (current
// scaling on one rank). Its timeline's markers are host clock readings, and it counts those not
// given back.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <chrono>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/ops.h"

namespace ptrain::test {

class PretendDeviceOps final : public kernels::Ops {
 public:
  using Buf = kernels::Buf;
  mutable std::atomic<int> copies_in{0}, copies_out{0};
  bool check_cast_amaxes = false;  // count fp8_casts whose amax is not bit for bit abs_max of x
  mutable std::atomic<int> casts_checked{0}, cast_amax_mismatches{0};

  kernels::Device device() const override { return kernels::Device::Cuda; }
  void linear_forward(Buf out, Buf in, Buf w, Buf b, int M, int N, int K) const override {
    cpu().linear_forward(out, in, w, b, M, N, K);
  }
  void linear_backward(Buf d_in, Buf d_w, Buf d_b, Buf d_out, Buf in, Buf w, int M, int N, int K) const override {
    cpu().linear_backward(d_in, d_w, d_b, d_out, in, w, M, N, K);
  }
  void linear_gelu_forward(Buf out, Buf pre, Buf in, Buf w, Buf b, int M, int N, int K) const override {
    cpu().linear_gelu_forward(out, pre, in, w, b, M, N, K);
  }
  void linear_input_grad_add(Buf d_in, Buf d_out, Buf w, int M, int N, int K) const override {
    cpu().linear_input_grad_add(d_in, d_out, w, M, N, K);
  }
  void linear_backward_gelu(Buf d_pre, Buf d_w, Buf d_b, Buf d_out, Buf in, Buf w, Buf pre, int M, int N,
                            int K) const override {
    cpu().linear_backward_gelu(d_pre, d_w, d_b, d_out, in, w, pre, M, N, K);
  }
  void embedding_forward(Buf out, Buf tokens, Buf table, Buf pos, int N, int T, int C) const override {
    cpu().embedding_forward(out, tokens, table, pos, N, T, C);
  }
  void embedding_backward(Buf d_table, Buf d_pos, Buf d_out, Buf tokens, int N, int T, int C) const override {
    cpu().embedding_backward(d_table, d_pos, d_out, tokens, N, T, C);
  }
  void layernorm_forward(Buf out, Buf mean, Buf rstd, Buf in, Buf w, Buf b, int N, int C, float eps,
                         Buf amax) const override {
    cpu().layernorm_forward(out, mean, rstd, in, w, b, N, C, eps, amax);
  }
  void layernorm_backward(Buf d_in, Buf d_w, Buf d_b, Buf d_out, Buf in, Buf w, Buf mean, Buf rstd, int N,
                          int C) const override {
    cpu().layernorm_backward(d_in, d_w, d_b, d_out, in, w, mean, rstd, N, C);
  }
  void rmsnorm_forward(Buf out, Buf rstd, Buf in, Buf w, int N, int C, float eps, Buf amax) const override {
    cpu().rmsnorm_forward(out, rstd, in, w, N, C, eps, amax);
  }
  void rmsnorm_backward(Buf d_in, Buf d_w, Buf d_out, Buf in, Buf w, Buf rstd, int N, int C) const override {
    cpu().rmsnorm_backward(d_in, d_w, d_out, in, w, rstd, N, C);
  }
  void add_layernorm_forward(Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b, Buf w, Buf bias, int N, int C,
                             float eps, Buf amax) const override {
    cpu().add_layernorm_forward(x_out, out, mean, rstd, a, b, w, bias, N, C, eps, amax);
  }
  void add_rmsnorm_forward(Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf w, int N, int C, float eps,
                           Buf amax) const override {
    cpu().add_rmsnorm_forward(x_out, out, rstd, a, b, w, N, C, eps, amax);
  }
  void rope_forward(Buf x, int B, int T, int H, int D, float theta, int pos0) const override {
    cpu().rope_forward(x, B, T, H, D, theta, pos0);
  }
  void rope_backward(Buf d_x, int B, int T, int H, int D, float theta, int pos0) const override {
    cpu().rope_backward(d_x, B, T, H, D, theta, pos0);
  }
  void attention_forward(Buf out, Buf lse, Buf q, Buf k, Buf v,
                         const kernels::AttentionShape& s) const override {
    cpu().attention_forward(out, lse, q, k, v, s);
  }
  void attention_backward(Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                          const kernels::AttentionShape& s) const override {
    cpu().attention_backward(d_q, d_k, d_v, d_out, q, k, v, out, lse, s);
  }
  void attention_merge(Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H, int D) const override {
    cpu().attention_merge(out, lse, part, part_lse, B, T, H, D);
  }
  void gelu_forward(Buf out, Buf in, std::int64_t n, Buf amax) const override {
    cpu().gelu_forward(out, in, n, amax);
  }
  void gelu_backward(Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax) const override {
    cpu().gelu_backward(d_in, d_out, in, n, amax);
  }
  void swiglu_forward(Buf out, Buf gate, Buf up, std::int64_t n, Buf amax) const override {
    cpu().swiglu_forward(out, gate, up, n, amax);
  }
  void swiglu_backward(Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up, std::int64_t n,
                       Buf amax) const override {
    cpu().swiglu_backward(d_gate, d_up, d_out, gate, up, n, amax);
  }
  void add(Buf out, Buf a, Buf b, std::int64_t n) const override { cpu().add(out, a, b, n); }
  void accumulate(Buf acc, Buf x, std::int64_t n) const override { cpu().accumulate(acc, x, n); }
  void scale(Buf x, float factor, std::int64_t n) const override { cpu().scale(x, factor, n); }
  void fill(Buf x, float value, std::int64_t n) const override { cpu().fill(x, value, n); }
  void fill_normal(Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key, std::uint64_t first,
                   std::uint64_t row_stride, float stddev) const override {
    cpu().fill_normal(x, rows, cols, key, first, row_stride, stddev);
  }
  void convert(Buf dst, Buf src, std::int64_t n) const override { cpu().convert(dst, src, n); }
  void cross_entropy_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf targets, int N, int V, int Vp,
                                      float grad_scale) const override {
    cpu().cross_entropy_forward_backward(losses, d_logits, logits, targets, N, V, Vp, grad_scale);
  }
  void cross_entropy_shard_stats(Buf stats, Buf logits, Buf targets, int N, int V, int Vs,
                                 int shard) const override {
    cpu().cross_entropy_shard_stats(stats, logits, targets, N, V, Vs, shard);
  }
  void cross_entropy_shard_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf all_stats, Buf targets,
                                            int N, int V, int Vs, int shard, int shards,
                                            float grad_scale) const override {
    cpu().cross_entropy_shard_forward_backward(losses, d_logits, logits, all_stats, targets, N, V, Vs, shard,
                                               shards, grad_scale);
  }
  void moe_route(Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits, int B, int T, int E,
                 int k, int capacity, int first_expert, int experts_here) const override {
    cpu().moe_route(probs, choice, weight, slot, counts, logits, B, T, E, k, capacity, first_expert,
                    experts_here);
  }
  void moe_route_backward(Buf d_logits, Buf d_weight, Buf probs, Buf choice, Buf weight, Buf counts, int B,
                          int T, int E, int k, float aux_scale) const override {
    cpu().moe_route_backward(d_logits, d_weight, probs, choice, weight, counts, B, T, E, k, aux_scale);
  }
  void moe_scatter(Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight, int N, int k, int R,
                   int C) const override {
    cpu().moe_scatter(rows, d_weight, x, src, slot, weight, N, k, R, C);
  }
  void moe_combine(Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C) const override {
    cpu().moe_combine(out, rows, slot, weight, N, k, C);
  }
  void adamw_step(Buf p, Buf g, Buf m, Buf v, Buf out, std::int64_t n, const kernels::AdamWStep& s) const override {
    cpu().adamw_step(p, g, m, v, out, n, s);
  }
  void sum(Buf out, Buf x, std::int64_t n) const override { cpu().sum(out, x, n); }
  void sum_squares(Buf out, Buf x, std::int64_t n) const override { cpu().sum_squares(out, x, n); }
  void abs_max(Buf amax, Buf x, std::int64_t n, bool combine) const override {
    {
      const std::lock_guard<std::mutex> lock(abs_max_mutex_);
      abs_max_passes_.push_back(n);
    }
    cpu().abs_max(amax, x, n, combine);
  }
  // How many abs_max passes were over n elements.
  std::int64_t abs_max_passes(std::int64_t n) const {
    const std::lock_guard<std::mutex> lock(abs_max_mutex_);
    return std::count(abs_max_passes_.begin(), abs_max_passes_.end(), n);
  }
  void fp8_round(Buf out, Buf x, Buf amax, std::int64_t n, kernels::Fp8Format format) const override {
    cpu().fp8_round(out, x, amax, n, format);
  }
  void fp8_cast(Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax, std::int64_t rows,
                std::int64_t cols) const override {
    if (check_cast_amaxes) {
      float want = 0;
      cpu().abs_max({&want, kernels::DType::F32}, x, rows * cols, false);
      ++casts_checked;
      if (std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(*amax.as<const float>()))
        ++cast_amax_mismatches;
    }
    cpu().fp8_cast(out, out_t, inv_scale, record, x, amax, rows, cols);
  }
  void fp8_gemm(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N, int K,
                bool accumulate, kernels::Fp8Sums sums) const override {
    count_sums(a, b, sums);
    cpu().fp8_gemm(out, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, accumulate, sums);
  }
  void fp8_gemm_gelu(Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N,
                     int K, kernels::Fp8Sums sums, Buf amax) const override {
    count_sums(a, b, sums);
    cpu().fp8_gemm_gelu(out, pre, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, sums, amax);
  }
  void* allocate(std::size_t bytes) const override { return cpu().allocate(bytes); }
  void release(void* ptr) const override { cpu().release(ptr); }
  void copy_to_device(Buf dst, const void* host, std::size_t bytes) const override {
    ++copies_in;
    cpu().copy_to_device(dst, host, bytes);
  }
  void copy_to_host(void* host, Buf src, std::size_t bytes) const override {
    ++copies_out;
    cpu().copy_to_host(host, src, bytes);
  }
  void copy(Buf dst, Buf src, std::size_t bytes) const override { cpu().copy(dst, src, bytes); }
  void copy_rows(Buf dst, std::size_t dst_pitch, Buf src, std::size_t src_pitch, std::size_t width,
                 std::size_t rows) const override {
    cpu().copy_rows(dst, dst_pitch, src, src_pitch, width, rows);
  }
  std::uint64_t record_marker(const void* stream) const override {
    static_cast<void>(stream);  // one host clock for every stream
    const std::lock_guard<std::mutex> lock(markers_mutex_);
    marker_times_.push_back(std::chrono::steady_clock::now());
    live_markers_.insert(marker_times_.size());
    return marker_times_.size();
  }
  double marker_seconds(std::uint64_t from, std::uint64_t to) const override {
    const std::lock_guard<std::mutex> lock(markers_mutex_);
    if (!live_markers_.count(from) || !live_markers_.count(to)) throw std::logic_error("marker not live");
    return std::chrono::duration<double>(marker_times_[to - 1] - marker_times_[from - 1]).count();
  }
  void release_marker(std::uint64_t marker) const override {
    const std::lock_guard<std::mutex> lock(markers_mutex_);
    if (marker != 0 && live_markers_.erase(marker) == 0) throw std::logic_error("marker released twice");
  }
  // The FP8 GEMMs run: a forward's (E4M3 x E4M3) or a gradient's (an E5M2 operand), summed as `sums`.
  int fp8_gemms(bool forward, kernels::Fp8Sums sums) const {
    return fp8_gemm_counts_[forward][static_cast<int>(sums)];
  }
  std::size_t live_markers() const {
    const std::lock_guard<std::mutex> lock(markers_mutex_);
    return live_markers_.size();
  }

 private:
  static const kernels::Ops& cpu() { return kernels::cpu_ops(); }
  void count_sums(Buf a, Buf b, kernels::Fp8Sums sums) const {
    const bool forward = a.dtype == kernels::DType::E4M3 && b.dtype == kernels::DType::E4M3;
    ++fp8_gemm_counts_[forward][static_cast<int>(sums)];
  }
  mutable std::atomic<int> fp8_gemm_counts_[2][2] = {};  // [forward][sums]
  mutable std::mutex markers_mutex_;
  mutable std::vector<std::chrono::steady_clock::time_point> marker_times_;
  mutable std::set<std::uint64_t> live_markers_;
  mutable std::mutex abs_max_mutex_;
  mutable std::vector<std::int64_t> abs_max_passes_;
};

}  // namespace ptrain::test
