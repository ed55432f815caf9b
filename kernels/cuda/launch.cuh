// What every op entry shares: the launch context that CudaOps owns (launch_context.h), stream-ordered
// scratch memory, the F32/BF16 element-type dispatch, grid sizing and a grid-stride "map" kernel for
// elementwise functors.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/buffer.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch_context.h"

namespace ptrain::kernels::cuda {

using bf16 = __nv_bfloat16;

// Temporary device memory for `count` T's, allocated and freed in stream order on the compute stream
// (no host synchronisation): freeing it after enqueuing the kernels that use it is safe.
template <typename T>
class Scratch {
 public:
  Scratch(const LaunchContext& ctx, std::size_t count) : stream_(ctx.stream) {
    if (count == 0) return;
    void* p = nullptr;
    PTRAIN_CUDA_CHECK(cudaMallocFromPoolAsync(&p, count * sizeof(T), ctx.scratch_pool, ctx.stream));
    ptr_ = static_cast<T*>(p);
  }
  ~Scratch() {
    if (ptr_ != nullptr) static_cast<void>(cudaFreeAsync(ptr_, stream_));  // never throws from a destructor
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  T* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  T* ptr_ = nullptr;
};

// Typed view of a Buf (after the entry checked its dtype).
template <typename T>
T* typed(Buf b) {
  return static_cast<T*>(b.ptr);
}

// Calls f with a null pointer of the element type of `t` (float* for F32, bf16* for BF16), so that
// the caller can write `[&](auto* tag) { using T = std::remove_pointer_t<decltype(tag)>; ... }`.
// The entry has checked that t is F32 or BF16.
template <typename F>
void dispatch_float(DType t, F&& f) {
  if (t == DType::BF16) {
    f(static_cast<bf16*>(nullptr));
  } else {
    f(static_cast<float*>(nullptr));
  }
}

inline constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n items, one item per thread up to a cap (the loop covers the rest).
inline unsigned grid_for(std::int64_t n, int block = kBlock) {
  constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 16;
  const std::int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kMaxBlocks));
}

// Threads for a kernel with one block per row of C items (values, or Packs of them): about 4 items per
// thread, 32 to 512 threads, a multiple of 32 (block_sum's requirement). Depends on C only, so
// reductions are reproducible.
inline int row_block_size(int C) {
  const int per_thread_4 = ((C + 3) / 4 + 31) / 32 * 32;
  return std::clamp(per_thread_4, 32, 512);
}

// Elements of X in 16 bytes: the Pack width of the row kernels' vector path.
template <typename X>
inline constexpr int kRowVector = 16 / static_cast<int>(sizeof(X));

// Whether rows of C elements of X can be moved in Packs of kRowVector<X>: C a multiple of it and every
// given buffer (null ones are skipped) 16-byte aligned, so that each row starts aligned.
template <typename X>
bool rows_vectorizable(std::int64_t C, std::initializer_list<Buf> bufs) {
  if (C % kRowVector<X> != 0) return false;
  return std::all_of(bufs.begin(), bufs.end(),
                     [](Buf b) { return !b || reinterpret_cast<std::uintptr_t>(b.ptr) % 16 == 0; });
}

// Calls launch(std::integral_constant<int, P>{}) with P = kRowVector<X> when `vectors`, else 1: the
// row kernels are templates on their Pack width.
template <typename X, typename Launch>
void with_row_pack(bool vectors, Launch&& launch) {
  if (vectors) {
    launch(std::integral_constant<int, kRowVector<X>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// f(i) for every i in [0, n): f is a small trivially copyable functor with a __device__ operator().
template <typename F>
__global__ void map_kernel(std::int64_t n, F f) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

template <typename F>
void launch_map(cudaStream_t stream, std::int64_t n, const F& f) {
  if (n <= 0) return;
  map_kernel<<<grid_for(n), kBlock, 0, stream>>>(n, f);
  PTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace ptrain::kernels::cuda
