// Mixture-of-experts routing, dispatch and combine (ops.h), the CPU's arithmetic (kernels/cpu/moe.cpp)
// on the device:
//  - moe_route: one thread per token (softmax in fp32 with a double sum, top-k by repeated argmax,
//    ties to the lower index), then one block per sequence whose thread e scans the sequence's
//    choices in position order for expert e: the capacity decision needs no atomics and is the
//    CPU's exactly.
//  - moe_route_backward: one thread per token over its E probabilities.
//  - moe_scatter: the rows zeroed (stream-ordered memset), then one block per (token, choice) pair
//    copies its row scaled; d_weight is that block's dot product (block_sum: fixed order).
//  - moe_combine: one block per token sums its kept pairs' rows in choice order.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

__global__ void route_tokens_kernel(float* probs, std::int32_t* choice, float* weight, const float* logits,
                                    std::int64_t N, int E, int k) {
  const std::int64_t n = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* row = logits + n * E;
  float* p = probs + n * E;
  float max = -INFINITY;
  for (int e = 0; e < E; ++e) max = fmaxf(max, row[e]);
  double sum = 0;
  for (int e = 0; e < E; ++e) {
    p[e] = expf(row[e] - max);
    sum += p[e];
  }
  for (int e = 0; e < E; ++e) p[e] = static_cast<float>(p[e] / sum);
  std::int32_t* ch = choice + n * k;
  double chosen = 0;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || ch[i] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    ch[j] = best;
    chosen += p[best];
  }
  for (int j = 0; j < k; ++j) weight[n * k + j] = static_cast<float>(p[ch[j]] / chosen);
}

// Block b = sequence b; thread e (strided) = expert e.
__global__ void route_capacity_kernel(std::int32_t* slot, float* counts, const std::int32_t* choice, int T,
                                      int E, int k, int capacity, int first_expert, int experts_here,
                                      std::int64_t per_expert) {
  const std::int64_t b = blockIdx.x;
  const std::int64_t first = b * T * k, end = first + std::int64_t{T} * k;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    std::int64_t used = 0;
    for (std::int64_t i = first; i < end; ++i) {
      if (choice[i] != e) continue;
      const int here = e - first_expert;
      slot[i] = used < capacity && here >= 0 && here < experts_here
                    ? static_cast<std::int32_t>(here * per_expert + b * capacity + used)
                    : -1;
      ++used;
    }
    counts[b * E + e] = static_cast<float>(used);
  }
}

template <typename G>
__global__ void route_backward_kernel(G* d_logits, const float* d_weight, const float* probs,
                                      const std::int32_t* choice, const float* weight, const float* counts,
                                      std::int64_t N, int T, int E, int k, double aux_per_count) {
  const std::int64_t n = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const std::int64_t b = n / T;
  const float* p = probs + n * E;
  double chosen = 0, dw_dot_w = 0;
  for (int j = 0; j < k; ++j) {
    chosen += p[choice[n * k + j]];
    dw_dot_w += static_cast<double>(d_weight[n * k + j]) * weight[n * k + j];
  }
  // d p_e = aux + (renormalisation, for the chosen e); the softmax backward needs sum_e p_e d p_e first.
  auto d_p = [&](int e) {
    double d = aux_per_count * counts[b * E + e];
    for (int j = 0; j < k; ++j)
      if (choice[n * k + j] == e) d += (d_weight[n * k + j] - dw_dot_w) / chosen;
    return d;
  };
  double p_dot_dp = 0;
  for (int e = 0; e < E; ++e) p_dot_dp += p[e] * d_p(e);
  for (int e = 0; e < E; ++e) store_f32(d_logits + n * E + e, static_cast<float>(p[e] * (d_p(e) - p_dot_dp)));
}

// Block i = pair i = n*k + j.
template <typename X>
__global__ void scatter_kernel(X* rows, float* d_weight, const X* x, const X* src, const std::int32_t* slot,
                               const float* weight, int k, int C) {
  const std::int64_t i = blockIdx.x;
  const std::int64_t s = slot[i];
  const X* token = x + i / k * C;
  if (d_weight != nullptr) {  // every thread reaches block_sum
    float dot = 0;
    if (s >= 0)
      for (int c = threadIdx.x; c < C; c += blockDim.x) dot += to_f32(token[c]) * to_f32(src[s * C + c]);
    dot = block_sum(dot);
    if (threadIdx.x == 0) d_weight[i] = dot;
  }
  if (s < 0) return;
  const float scale = weight != nullptr ? weight[i] : 1.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) store_f32(rows + s * C + c, scale * to_f32(token[c]));
}

// Block n = token n.
template <typename X>
__global__ void combine_kernel(X* out, const X* rows, const std::int32_t* slot, const float* weight, int k,
                               int C) {
  const std::int64_t n = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < k; ++j) {
      const std::int64_t s = slot[n * k + j];
      if (s >= 0) acc += (weight != nullptr ? weight[n * k + j] : 1.0f) * to_f32(rows[s * C + c]);
    }
    store_f32(out + n * C + c, acc);
  }
}

unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>((n + kBlock - 1) / kBlock);
}

}  // namespace

void moe_route(const LaunchContext& ctx, Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits,
               int B, int T, int E, int k, int capacity, int first_expert, int experts_here) {
  check_moe_route("cuda", probs, choice, weight, slot, counts, logits, B, T, E, k, capacity, first_expert,
                  experts_here);
  const std::int64_t N = std::int64_t{B} * T;
  if (B == 0) return;
  if (N > 0) {
    route_tokens_kernel<<<blocks_for(N), kBlock, 0, ctx.stream>>>(
        typed<float>(probs), typed<std::int32_t>(choice), typed<float>(weight), typed<const float>(logits), N,
        E, k);
    PTRAIN_CUDA_CHECK_LAUNCH();
  }
  route_capacity_kernel<<<static_cast<unsigned>(B), std::min(E, 256), 0, ctx.stream>>>(
      typed<std::int32_t>(slot), typed<float>(counts), typed<const std::int32_t>(choice), T, E, k, capacity,
      first_expert, experts_here, std::int64_t{B} * capacity);
  PTRAIN_CUDA_CHECK_LAUNCH();
}

void moe_route_backward(const LaunchContext& ctx, Buf d_logits, Buf d_weight, Buf probs, Buf choice,
                        Buf weight, Buf counts, int B, int T, int E, int k, float aux_scale) {
  check_moe_route_backward("cuda", d_logits, d_weight, probs, choice, weight, counts, B, T, E, k);
  const std::int64_t N = std::int64_t{B} * T;
  if (N == 0) return;
  const double aux_per_count = static_cast<double>(aux_scale) * E / (static_cast<double>(T) * T);
  dispatch_float(d_logits.dtype, [&](auto* tag) {
    using G = std::remove_pointer_t<decltype(tag)>;
    route_backward_kernel<<<blocks_for(N), kBlock, 0, ctx.stream>>>(
        typed<G>(d_logits), typed<const float>(d_weight), typed<const float>(probs),
        typed<const std::int32_t>(choice), typed<const float>(weight), typed<const float>(counts), N, T, E, k,
        aux_per_count);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

void moe_scatter(const LaunchContext& ctx, Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight,
                 int N, int k, int R, int C) {
  check_moe_scatter("cuda", rows, d_weight, x, src, slot, weight, N, k, R, C);
  const std::int64_t rc = std::int64_t{R} * C;
  if (rc > 0) PTRAIN_CUDA_CHECK(cudaMemsetAsync(rows.ptr, 0, rc * dtype_size(rows.dtype), ctx.stream));
  const std::int64_t pairs = std::int64_t{N} * k;
  if (pairs == 0 || C == 0) {
    if (d_weight && pairs > 0)
      PTRAIN_CUDA_CHECK(cudaMemsetAsync(d_weight.ptr, 0, pairs * sizeof(float), ctx.stream));
    return;
  }
  dispatch_float(rows.dtype, [&](auto* tag) {
    using X = std::remove_pointer_t<decltype(tag)>;
    scatter_kernel<<<static_cast<unsigned>(pairs), row_block_size(C), 0, ctx.stream>>>(
        typed<X>(rows), d_weight ? typed<float>(d_weight) : nullptr, typed<const X>(x),
        d_weight ? typed<const X>(src) : nullptr, typed<const std::int32_t>(slot),
        weight ? typed<const float>(weight) : nullptr, k, C);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

void moe_combine(const LaunchContext& ctx, Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C) {
  check_moe_combine("cuda", out, rows, slot, weight, N, k, C);
  if (N == 0 || C == 0) return;
  dispatch_float(out.dtype, [&](auto* tag) {
    using X = std::remove_pointer_t<decltype(tag)>;
    combine_kernel<<<static_cast<unsigned>(N), row_block_size(C), 0, ctx.stream>>>(
        typed<X>(out), typed<const X>(rows), typed<const std::int32_t>(slot),
        weight ? typed<const float>(weight) : nullptr, k, C);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ptrain::kernels::cuda
