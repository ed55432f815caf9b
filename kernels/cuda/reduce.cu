// Sum of squares (gradient-norm clipping), in double, returned to the host. Deterministic two-pass
// reduction: a fixed grid (a function of n only) of grid-stride blocks, each summing its elements in
// double and reducing in a fixed tree to one partial; then one block adds the partials in order.
// The result is copied back and the stream synchronised (the only way to return a value).
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

template <typename E>
__global__ void sum_squares_partial_kernel(const E* x, std::int64_t n, double* partial) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  double s = 0.0;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = to_f32(x[i]);
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const double* partial, int count, double* total) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *total = s;
}

}  // namespace

double sum_squares(const LaunchContext& ctx, Buf x, std::int64_t n) {
  check_sum_squares("cuda", x, n);
  if (n == 0) return 0.0;
  const int blocks = static_cast<int>(std::min<std::int64_t>((n + kBlock - 1) / kBlock, kMaxPartials));
  Scratch<double> partial(ctx, static_cast<std::size_t>(blocks) + 1);
  double* total = partial.get() + blocks;
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    sum_squares_partial_kernel<E>
        <<<static_cast<unsigned>(blocks), kBlock, 0, ctx.stream>>>(typed<const E>(x), n, partial.get());
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, kBlock, 0, ctx.stream>>>(partial.get(), blocks, total);
  PTRAIN_CUDA_CHECK_LAUNCH();
  double result = 0.0;
  PTRAIN_CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  PTRAIN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  return result;
}

}  // namespace ptrain::kernels::cuda
