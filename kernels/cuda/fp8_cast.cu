// fp8_cast on CUDA (ops.h): x [rows, cols] to FP8 codes, their transpose, the inverse scale and the
// record's amax in one pass over x. One block per tile of 32 rows x 64 columns, 256 threads, each a
// pack of 8 consecutive values of a row: loaded in 16-byte accesses, scaled, converted two at a time
// by the hardware (cvt.rn.satfinite.e4m3x2 / e5m2x2 on sm_89+, cuda_fp8.h's exact emulation below:
// kernels/fp8.h's rounding either way), stored as 8 bytes; the tile's codes go through shared memory
// to be stored transposed, again 8 bytes a thread. The scale is computed once per block from amax[0]
// (fp8_scale, the host's function); block (0, 0) writes 1/scale. The record: each thread's largest
// |x| as the bits of a non-negative float, folded into the record by the block (amax.cuh, as the
// ops' fused amax) -- the same value as the CPU's max, NaN kept. Shapes whose rows and columns are
// not multiples of 8, or buffers not aligned for the packs, take the same kernel with per-element
// loads and stores.
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

constexpr int kTileRows = 32, kTileCols = 64, kPack = 8;
constexpr int kCastThreads = kTileRows * kTileCols / kPack;  // 256: one pack each, either way
static_assert(kCastThreads == kTileCols * kTileRows / kPack);

struct CastArgs {
  std::uint8_t* out;    // [rows, cols] or null
  std::uint8_t* out_t;  // [cols, rows] or null
  float* inv_scale;
  unsigned* record;  // a float's bits, or null
  const float* amax;
  std::int64_t rows, cols;
  __nv_fp8_interpretation_t interpretation;
  Fp8Format format;
};

// kVector: rows and cols multiples of kPack and every buffer aligned for the packs (cast_vectorizable),
// so a pack is wholly inside or wholly outside the matrix.
template <typename E, bool kVector>
__global__ void __launch_bounds__(kCastThreads) cast_kernel(const E* x, CastArgs a) {
  __shared__ float scale;
  __shared__ std::uint8_t tile[kTileRows][kTileCols + 8];  // +8: the transposed reads spread over banks
  if (threadIdx.x == 0) {
    scale = fp8_scale(*a.amax, a.format);
    if (blockIdx.x == 0 && blockIdx.y == 0) *a.inv_scale = 1.0f / scale;  // exact: a power of two
  }
  __syncthreads();

  const std::int64_t row0 = std::int64_t{blockIdx.x} * kTileRows, col0 = std::int64_t{blockIdx.y} * kTileCols;
  const int r = static_cast<int>(threadIdx.x) / (kTileCols / kPack);
  const int c = static_cast<int>(threadIdx.x) % (kTileCols / kPack) * kPack;
  const std::int64_t row = row0 + r, col = col0 + c;
  const bool row_in = row < a.rows;
  float v[kPack];
  if (kVector) {
    Pack<E, kPack> p;
    if (row_in && col < a.cols) {
      p.load(x + row * a.cols + col);
    } else {
#pragma unroll
      for (int j = 0; j < kPack; ++j) p.v[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[j] = p.v[j];
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[j] = row_in && col + j < a.cols ? to_f32(x[row * a.cols + col + j]) : 0.0f;
  }

  unsigned magnitude = 0;  // outside the matrix v is 0: it adds nothing
  alignas(8) std::uint8_t codes[kPack];
#pragma unroll
  for (int j = 0; j < kPack; j += 2) {
    magnitude = max(magnitude, max(abs_bits(v[j]), abs_bits(v[j + 1])));
    const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(make_float2(v[j] * scale, v[j + 1] * scale),
                                                              __NV_SATFINITE, a.interpretation);
    codes[j] = static_cast<std::uint8_t>(two & 0xFFu);  // .x in the low byte
    codes[j + 1] = static_cast<std::uint8_t>(two >> 8);
  }
  if (a.out != nullptr) {
    std::uint8_t* o = a.out + row * a.cols + col;
    if (kVector) {
      if (row_in && col < a.cols) *reinterpret_cast<uint2*>(o) = *reinterpret_cast<const uint2*>(codes);
    } else {
#pragma unroll
      for (int j = 0; j < kPack; ++j)
        if (row_in && col + j < a.cols) o[j] = codes[j];
    }
  }
  if (a.record != nullptr) block_fold_amax(a.record, magnitude);  // every thread: none returned yet
  if (a.out_t == nullptr) return;

#pragma unroll
  for (int j = 0; j < kPack; ++j) tile[r][c + j] = codes[j];
  __syncthreads();
  // Now thread t stores kPack rows of the tile's column t / 4 as one run of the transpose's row.
  const int tc = static_cast<int>(threadIdx.x) / (kTileRows / kPack);
  const int tr = static_cast<int>(threadIdx.x) % (kTileRows / kPack) * kPack;
  const std::int64_t t_row = col0 + tc, t_col = row0 + tr;  // in out_t [cols, rows]
  if (t_row >= a.cols) return;
  alignas(8) std::uint8_t column[kPack];
#pragma unroll
  for (int j = 0; j < kPack; ++j) column[j] = tile[tr + j][tc];
  std::uint8_t* o = a.out_t + t_row * a.rows + t_col;
  if (kVector) {
    if (t_col < a.rows) *reinterpret_cast<uint2*>(o) = *reinterpret_cast<const uint2*>(column);
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j)
      if (t_col + j < a.rows) o[j] = column[j];
  }
}

bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

bool cast_vectorizable(Buf out, Buf out_t, Buf x, std::int64_t rows, std::int64_t cols) {
  return rows % kPack == 0 && cols % kPack == 0 && aligned(x.ptr, 16) && (!out || aligned(out.ptr, 8)) &&
         (!out_t || aligned(out_t.ptr, 8));
}

}  // namespace

void fp8_cast(const LaunchContext& ctx, Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax,
              std::int64_t rows, std::int64_t cols) {
  check_fp8_cast("cuda", out, out_t, inv_scale, record, x, amax, rows, cols);
  const std::int64_t row_tiles = (rows + kTileRows - 1) / kTileRows, col_tiles = (cols + kTileCols - 1) / kTileCols;
  require(col_tiles <= 65535, "cuda", "fp8_cast", "more than 65535 * 64 columns");
  const Fp8Format format = fp8_format(out ? out.dtype : out_t.dtype);
  const CastArgs args{typed<std::uint8_t>(out), typed<std::uint8_t>(out_t), typed<float>(inv_scale),
                      typed<unsigned>(record), typed<const float>(amax), rows, cols,
                      format == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2, format};
  // An empty x still writes the inverse scale (one block, which stores nothing else).
  const dim3 grid(static_cast<unsigned>(std::max<std::int64_t>(row_tiles, 1)),
                  static_cast<unsigned>(std::max<std::int64_t>(col_tiles, 1)));
  const bool vector = cast_vectorizable(out, out_t, x, rows, cols);
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    if (vector)
      cast_kernel<E, true><<<grid, kCastThreads, 0, ctx.stream>>>(typed<const E>(x), args);
    else
      cast_kernel<E, false><<<grid, kCastThreads, 0, ctx.stream>>>(typed<const E>(x), args);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ptrain::kernels::cuda
