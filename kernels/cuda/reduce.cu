// Sum and sum of squares (token losses, gradient-norm clipping) into out[0] in device memory: no
// host synchronisation. Deterministic two-pass reduction: a fixed grid (a function of n only) of
// grid-stride blocks, each summing its elements' terms in double and reducing in a fixed tree to one
// partial; then one block adds the partials in order and stores the total rounded to F32.
// x is F32 or BF16.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

constexpr int kMaxPartials = 1024;

struct Identity {
  __device__ double operator()(double v) const { return v; }
};
struct Square {
  __device__ double operator()(double v) const { return v * v; }
};

template <typename E, typename Term>
__global__ void partial_sums_kernel(const E* x, std::int64_t n, double* partial, Term term) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  double s = 0.0;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    s += term(static_cast<double>(to_f32(x[i])));
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void total_kernel(const double* partial, int count, float* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = static_cast<float>(s);
}

template <typename Term>
void reduce(const LaunchContext& ctx, const char* op, Buf out, Buf x, std::int64_t n, Term term) {
  check_reduction("cuda", op, out, x, n);
  const int blocks = static_cast<int>(std::clamp<std::int64_t>((n + kBlock - 1) / kBlock, 1, kMaxPartials));
  Scratch<double> partial(ctx, static_cast<std::size_t>(blocks));
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    partial_sums_kernel<E, Term>
        <<<static_cast<unsigned>(blocks), kBlock, 0, ctx.stream>>>(typed<const E>(x), n, partial.get(), term);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
  total_kernel<<<1, kBlock, 0, ctx.stream>>>(partial.get(), blocks, typed<float>(out));
  PTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sum(const LaunchContext& ctx, Buf out, Buf x, std::int64_t n) {
  reduce(ctx, "sum", out, x, n, Identity{});
}

void sum_squares(const LaunchContext& ctx, Buf out, Buf x, std::int64_t n) {
  reduce(ctx, "sum_squares", out, x, n, Square{});
}

}  // namespace ptrain::kernels::cuda
