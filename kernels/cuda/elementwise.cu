// Elementwise arithmetic over n values: add, accumulate, scale, fill (grid-stride, fp32 math), and
// the dtype conversion.
// Dtypes: add's out, a, b share one element type (F32 or BF16); accumulate's acc and x are each F32
// or BF16 (F32 acc += BF16 x is the mixed-precision gradient case); scale and fill take either;
// convert's dst and src are each F32 or BF16 (equal dtypes: a device-to-device copy).
// out may alias a or b element for element.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

template <typename E>
struct Add {
  E* out;
  const E* a;
  const E* b;
  __device__ void operator()(std::int64_t i) const { store_f32(out + i, to_f32(a[i]) + to_f32(b[i])); }
};

// Elements [i P, (i + 1) P) of acc += x.
template <int P, typename A, typename X>
struct Accumulate {
  A* acc;
  const X* x;
  __device__ void operator()(std::int64_t i) const {
    Pack<A, P> sum;
    Pack<X, P> addend;
    sum.load(acc + i * P);
    addend.load(x + i * P);
#pragma unroll
    for (int j = 0; j < P; ++j) sum.v[j] += addend.v[j];
    sum.store(acc + i * P);
  }
};

template <typename E>
struct Scale {
  E* x;
  float factor;
  __device__ void operator()(std::int64_t i) const { store_f32(x + i, to_f32(x[i]) * factor); }
};

template <typename E>
struct Fill {
  E* x;
  float value;
  __device__ void operator()(std::int64_t i) const { store_f32(x + i, value); }
};

template <typename D, typename S>
struct Convert {
  D* dst;
  const S* src;
  __device__ void operator()(std::int64_t i) const { store_f32(dst + i, to_f32(src[i])); }
};

}  // namespace

void add(const LaunchContext& ctx, Buf out, Buf a, Buf b, std::int64_t n) {
  check_add("cuda", out, a, b, n);
  dispatch_float(out.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n, Add<E>{typed<E>(out), typed<const E>(a), typed<const E>(b)});
  });
}

void accumulate(const LaunchContext& ctx, Buf acc, Buf x, std::int64_t n) {
  check_accumulate("cuda", acc, x, n);
  dispatch_float(acc.dtype, [&](auto* a_tag) {
    using A = std::remove_pointer_t<decltype(a_tag)>;
    dispatch_float(x.dtype, [&](auto* x_tag) {
      using X = std::remove_pointer_t<decltype(x_tag)>;
      // In Packs of 16 bytes of x where n and the alignment allow (the residual branches' gradients).
      with_row_pack<X>(rows_vectorizable<X>(n, {acc, x}), [&](auto pack) {
        constexpr int P = decltype(pack)::value;
        launch_map(ctx.stream, n / P, Accumulate<P, A, X>{typed<A>(acc), typed<const X>(x)});
      });
    });
  });
}

void scale(const LaunchContext& ctx, Buf x, float factor, std::int64_t n) {
  check_scale("cuda", x, n);
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n, Scale<E>{typed<E>(x), factor});
  });
}

void fill(const LaunchContext& ctx, Buf x, float value, std::int64_t n) {
  check_fill("cuda", x, n);
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n, Fill<E>{typed<E>(x), value});
  });
}

void convert(const LaunchContext& ctx, Buf dst, Buf src, std::int64_t n) {
  check_convert("cuda", dst, src, n);
  if (n == 0) return;
  if (dst.dtype == src.dtype) {
    PTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, static_cast<std::size_t>(n) * dtype_size(dst.dtype),
                                      cudaMemcpyDeviceToDevice, ctx.stream));
  } else if (dst.dtype == DType::BF16) {
    launch_map(ctx.stream, n, Convert<bf16, float>{typed<bf16>(dst), typed<const float>(src)});
  } else {
    launch_map(ctx.stream, n, Convert<float, bf16>{typed<float>(dst), typed<const bf16>(src)});
  }
}

}  // namespace ptrain::kernels::cuda
