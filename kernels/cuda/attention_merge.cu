// attention_merge (ops.h) on CUDA: folds the attention `part` of the same queries over other keys, with
// its log-sum-exp part_lse, into out and lse. Per row, with m = max(lse, part_lse):
//   wa = e^(lse - m), wb = e^(part_lse - m), out = (wa out + wb part) / (wa + wb), lse = m + ln(wa + wb).
// A row whose lse is -inf has seen no key yet: whatever out holds must not reach the sum, so it takes
// part as it is (also where wa underflows to 0); a row where both are -inf is left alone. As
// kernels/cpu/attention_merge.cpp, in fp32 (BF16 storage: loads widened, stores rounded to nearest).
//
// One warp per row (b, t, h) of out, its lanes across D (coalesced); lane 0 reads the row's two
// log-sum-exps and hands them to the warp before it alone overwrites lse, so no lane reads a
// statistic another has updated.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_merge.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

constexpr int kMergeThreads = 128;
constexpr int kMergeWarps = kMergeThreads / 32;  // rows per block and step

template <typename E>
__global__ void __launch_bounds__(kMergeThreads)
    attention_merge_kernel(E* __restrict__ out, float* __restrict__ lse, const E* __restrict__ part,
                           const float* __restrict__ part_lse, std::int64_t rows, int T, int H, int D) {
  const int lane = threadIdx.x & 31;
  const std::int64_t step = std::int64_t{gridDim.x} * kMergeWarps;
  for (std::int64_t row = std::int64_t{blockIdx.x} * kMergeWarps + threadIdx.x / 32; row < rows;
       row += step) {
    // row = (b*T + t)*H + h of out; its statistics sit at (b*H + h)*T + t of lse.
    const std::int64_t bt = row / H;
    const std::int64_t b = bt / T;
    const std::int64_t stat = (b * H + (row - bt * H)) * T + (bt - b * T);
    float la = 0.0f, lb = 0.0f;
    if (lane == 0) {
      la = lse[stat];
      lb = part_lse[stat];
    }
    la = __shfl_sync(0xffffffffu, la, 0);
    lb = __shfl_sync(0xffffffffu, lb, 0);
    const float m = fmaxf(la, lb);
    if (m == -INFINITY) continue;  // neither part saw a key (warp-uniform)
    const float wa = expf(la - m), wb = expf(lb - m), sum = wa + wb;
    const float ca = wa / sum, cb = wb / sum;
    E* o = out + row * D;
    const E* p = part + row * D;
    if (ca == 0.0f) {  // out holds nothing yet
      for (int d = lane; d < D; d += 32) o[d] = p[d];
    } else {
      for (int d = lane; d < D; d += 32) store_f32(o + d, ca * to_f32(o[d]) + cb * to_f32(p[d]));
    }
    if (lane == 0) lse[stat] = m + logf(sum);
  }
}

}  // namespace

void attention_merge(cudaStream_t stream, Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H,
                     int D) {
  check_attention_merge("cuda", out, lse, part, part_lse, B, T, H, D);
  const std::int64_t rows = std::int64_t{B} * T * H;
  if (rows == 0) return;  // (D = 0 still merges the statistics, as on the CPU)
  dispatch_float(out.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    attention_merge_kernel<E><<<grid_for(rows, kMergeWarps), kMergeThreads, 0, stream>>>(
        typed<E>(out), typed<float>(lse), typed<const E>(part), typed<const float>(part_lse), rows, T, H, D);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ptrain::kernels::cuda
