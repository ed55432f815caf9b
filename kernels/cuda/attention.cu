// Causal GQA flash attention on CUDA, forward and backward (see attention.cuh for the contract).
//
// Structure (FlashAttention-2):
//   forward    one CTA per (query tile, query head, batch). Loops over the key tiles up to the
//              diagonal (causal skip; the diagonal is shifted by q_pos0 when the queries are a later
//              chunk of the keys' sequence, context parallelism) or up to the last key, whichever comes
//              first: row i sees keys 0 .. min(q_pos0 + i, Tk - 1). Where the queries come after every key
//              (ring attention's block with an earlier chunk) only the tile holding key Tk - 1 needs a
//              mask. Online softmax in registers (running max m, running sum l, unnormalised output
//              rescaled by 2^(m_old - m_new)), then out = acc / l, lse = m + ln l.
//   backward   three kernels, deterministic (no atomics, no fp32 scratch for d_q):
//     row_dot  D_i = dot(d_out_i, out_i) per query row, parked in the first 4 bytes of d_q's row i
//              (d_q is overwritten later anyway; see attention.cuh).
//     dK/dV    one CTA per (key tile, kv head, batch): for each query head of the group and each
//              query tile from the diagonal on (none for keys no query sees: zeros), recompute P^T = exp(S^T
//              - lse) from K Q^T, then dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q. d_k
//              and d_v of a kv head are summed over its group in registers, in a fixed order.
//     dQ       one CTA per (query tile, query head, batch): over the key tiles up to the diagonal,
//              recompute P and dP, dS = P (dP - D), dQ += dS K.
//   The backward therefore computes S and dP twice (7 tile GEMMs instead of FA2's 5 with atomic dQ):
//   the price of bitwise run-to-run determinism and of needing no workspace.
//
// Two element paths share that structure:
//   BF16  tensor cores through inline PTX mma.sync.m16n8k16 (bf16 in, fp32 accumulate; sm_80+),
//         ldmatrix fragment loads, cp.async global->shared copies (double-buffered in the backward,
//         K/V overlap in the forward). Each warp owns whole 16-row tiles of the rows it iterates over
//         (two in the forward for D <= 96, else one), so the S accumulator fragment is reused directly
//         as the A operand of the next GEMM (P V, dS K...).
//         Tiles: forward (128 | 64 for D > 96) queries x 64 keys; dK/dV 64 keys x (64 | 32 for D > 64) queries;
//         dQ 64 queries x (64 | 32 for D > 64) keys. Shared rows are padded by 8 elements
//         (16 bytes), which makes every ldmatrix conflict-free.
//   F32   plain fp32 FMA on 32 x 32 tiles in shared memory: the correctness reference path
//         (fp32 training, tests), ~1 shared load per FMA.
// Exponentials are exp2f on scores pre-multiplied by scale * log2(e); lse is stored in natural log.
// The head dim D runs on tiles padded to kD in {32, 64, 80, 96, 128, 160, 192, 224, 256} (zero-filled,
// never stored). Above 128 the bf16 kernels split the columns they accumulate (O, dQ, dK/dV) into two
// chunks of kD / 2, one CTA each (blockIdx.z): S and dP still contract the whole head, recomputed by
// both CTAs, and every thread's accumulators stay the size they have at kD = 128.
// Shared memory per CTA stays below 75 KB up to kD = 128, so two CTAs share an SM; above it a CTA
// takes up to 140 KB (within sm_80's 163 KB). Above 48 KB it is opted into via cudaFuncSetAttribute,
// once per kernel and device.
// Files: this one the host side (shapes, launches); the kernels in attention_f32.cuh and
// attention_bf16.cuh, what they share (and row_dot) in attention_common.cuh, each included here only.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_bf16.cuh"
#include "kernels/cuda/attention_f32.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {

using bf16 = __nv_bfloat16;  // as in launch.cuh (a redeclaration of the same alias is fine)

namespace {

using namespace attention_detail;

// ------------------------------------------------------------------------------------------------
// Host side

// Up to kD = 128 every kernel fits the opt-in shared memory of sm_86/sm_89 (99 KB) with room to spare
// (sm_80: 163 KB, sm_90: 227 KB), so at least two CTAs share an SM on A100/H100. The wider head dims
// need one SM each, within sm_80's 163 KB (the architectures this backend builds for: 80 and 90).
static_assert(fwd_f32_smem<128>() <= 75 * 1024 && dq_f32_smem<128>() <= 75 * 1024 &&
              dkdv_f32_smem<128>() <= 75 * 1024);
static_assert(fwd_bf16_smem<128>() <= 75 * 1024 && dq_bf16_smem<128>() <= 75 * 1024 &&
              dkdv_bf16_smem<128>() <= 75 * 1024 && dkdv_bf16_smem<64>() <= 75 * 1024 &&
              dq_bf16_smem<64>() <= 75 * 1024);
constexpr int kSm80SmemBytes = 163 * 1024;
static_assert(fwd_f32_smem<256>() <= kSm80SmemBytes && dq_f32_smem<256>() <= kSm80SmemBytes &&
              dkdv_f32_smem<256>() <= kSm80SmemBytes);
static_assert(fwd_bf16_smem<256>() <= kSm80SmemBytes && dq_bf16_smem<256>() <= kSm80SmemBytes &&
              dkdv_bf16_smem<256>() <= kSm80SmemBytes);

// Dynamic shared memory above 48 KB needs an opt-in per kernel and device (once).
void allow_smem(const void* kernel, int bytes) {
  if (bytes <= 48 * 1024) return;
  int device = 0;
  PTRAIN_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.count({kernel, device}) != 0) return;
  PTRAIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert({kernel, device});
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, int smem, cudaStream_t stream, Args... args) {
  allow_smem(reinterpret_cast<const void*>(kernel), smem);
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  PTRAIN_CUDA_CHECK_LAUNCH();
}

// Head dims run on tiles padded to one of these.
int padded_head_dim(int D) {
  for (const int padded : {32, 64, 80, 96, 128, 160, 192, 224}) {
    if (D <= padded) return padded;
  }
  return 256;
}

struct Geometry {
  // off: the first query row's position (AttentionShape::q_pos0), at most Tk - 1: a row at or past the
  // last key's position sees every key wherever it sits, so the kernels mask alike (and off + row
  // stays within int for any q_pos0).
  int B, Tq, Tk, off, Hq, Hkv, D, G;
  float scale, scale_log2;
};

// The limits of these kernels (not of the contract, which op_checks.h has checked by now): head dims
// the tiles support and sequences whose tiles fit the grid.
Geometry check_geometry(const char* op, const AttentionShape& s) {
  const int D = s.D, T = std::max(s.Tq, s.Tk);
  if (D % kCudaHeadDimStep != 0 || D > kCudaMaxHeadDim) {
    fail("cuda", op,
         "head dim D=" + std::to_string(D) + " is not supported (multiples of " + std::to_string(kCudaHeadDimStep) +
             " up to " + std::to_string(kCudaMaxHeadDim) + ")");
  }
  // Query tiles go to gridDim.y (at most 65535); the smallest tile is 32 rows.
  if ((static_cast<long long>(T) + kF32Tile - 1) / kF32Tile > 65535) {
    fail("cuda", op,
         "T=" + std::to_string(T) + " is too long (at most " + std::to_string(65535 * kF32Tile) + ")");
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  return {s.B,
          s.Tq,
          s.Tk,
          s.Tk > 0 ? std::min(s.q_pos0, s.Tk - 1) : 0,  // no kernel runs without keys (Tq = 0 then)
          s.Hq,
          s.Hkv,
          D,
          s.Hq / s.Hkv,
          static_cast<float>(scale),
          static_cast<float>(scale * 1.4426950408889634)};
}

// The bf16 kernels' vector loads (cp.async, ldmatrix): another limit of this backend.
void require_aligned(const char* op, const char* name, Buf b) {
  if (reinterpret_cast<std::uintptr_t>(b.ptr) % 16 != 0) {
    fail("cuda", op, std::string("'") + name + "' must be 16-byte aligned for the bf16 kernels");
  }
}

int tiles(int T, int tile) {
  return (T + tile - 1) / tile;
}

template <int kD>
void forward_impl(cudaStream_t stream, const Geometry& g, Buf out, Buf lse, Buf q, Buf k, Buf v) {
  float* l = lse ? lse.as<float>() : nullptr;
  if (q.dtype == DType::F32) {
    launch(fwd_f32_kernel<kD>, dim3(g.B * g.Hq, tiles(g.Tq, kF32Tile)), fwd_f32_smem<kD>(), stream,
           q.as<const float>(), k.as<const float>(), v.as<const float>(), out.as<float>(), l, g.Tq, g.Tk,
           g.off, g.Hq, g.Hkv, g.D, g.G, g.scale_log2);
  } else {
    launch(fwd_bf16_kernel<kD>, dim3(g.B * g.Hq, tiles(g.Tq, fwd_rows<kD>()), out_chunks<kD>()),
           fwd_bf16_smem<kD>(), stream,
           q.as<const bf16>(), k.as<const bf16>(), v.as<const bf16>(), out.as<bf16>(), l, g.Tq, g.Tk, g.off,
           g.Hq, g.Hkv, g.D, g.G, g.scale_log2);
  }
}

template <int kD>
void backward_impl(cudaStream_t stream, const Geometry& g, Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k,
                   Buf v, Buf out, Buf lse) {
  const long long rows = static_cast<long long>(g.B) * g.Tq * g.Hq;
  const unsigned dot_blocks = static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
  const float* l = lse.as<const float>();
  if (q.dtype == DType::F32) {
    launch(row_dot_kernel<float>, dim3(dot_blocks), 0, stream, d_out.as<const float>(), out.as<const float>(),
           d_q.as<float>(), rows, g.D, 0);
    launch(dkdv_f32_kernel<kD>, dim3(g.B * g.Hkv, tiles(g.Tk, kF32Tile)), dkdv_f32_smem<kD>(), stream,
           q.as<const float>(), k.as<const float>(), v.as<const float>(), d_out.as<const float>(), l,
           d_q.as<const float>(), d_k.as<float>(), d_v.as<float>(), g.Tq, g.Tk, g.off, g.Hq, g.Hkv, g.D, g.G,
           g.scale_log2, g.scale);
    launch(dq_f32_kernel<kD>, dim3(g.B * g.Hq, tiles(g.Tq, kF32Tile)), dq_f32_smem<kD>(), stream,
           q.as<const float>(), k.as<const float>(), v.as<const float>(), d_out.as<const float>(), l,
           d_q.as<float>(), g.Tq, g.Tk, g.off, g.Hq, g.Hkv, g.D, g.G, g.scale_log2, g.scale);
  } else {
    // The second column chunk's dQ CTAs read D_i from their own first column (see dvec_slot).
    launch(row_dot_kernel<bf16>, dim3(dot_blocks), 0, stream, d_out.as<const bf16>(), out.as<const bf16>(),
           d_q.as<bf16>(), rows, g.D, out_chunks<kD>() > 1 ? out_cols<kD>() : 0);
    launch(dkdv_bf16_kernel<kD>, dim3(g.B * g.Hkv, tiles(g.Tk, kDkdvCols), out_chunks<kD>()),
           dkdv_bf16_smem<kD>(), stream,
           q.as<const bf16>(), k.as<const bf16>(), v.as<const bf16>(), d_out.as<const bf16>(), l,
           d_q.as<const bf16>(), d_k.as<bf16>(), d_v.as<bf16>(), g.Tq, g.Tk, g.off, g.Hq, g.Hkv, g.D, g.G,
           g.scale_log2, g.scale);
    launch(dq_bf16_kernel<kD>, dim3(g.B * g.Hq, tiles(g.Tq, kDqRows), out_chunks<kD>()), dq_bf16_smem<kD>(),
           stream,
           q.as<const bf16>(), k.as<const bf16>(), v.as<const bf16>(), d_out.as<const bf16>(), l,
           d_q.as<bf16>(), g.Tq, g.Tk, g.off, g.Hq, g.Hkv, g.D, g.G, g.scale_log2, g.scale);
  }
}

}  // namespace

void attention_forward(cudaStream_t stream, Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& s) {
  constexpr const char* op = "attention_forward";
  check_attention_forward("cuda", out, lse, q, k, v, s);
  const Geometry g = check_geometry(op, s);
  const int D = s.D;
  if (s.q_elements() == 0) return;
  if (q.dtype == DType::BF16) {
    require_aligned(op, "q", q);
    require_aligned(op, "k", k);
    require_aligned(op, "v", v);
    require_aligned(op, "out", out);
  }
  switch (padded_head_dim(D)) {
    case 32: return forward_impl<32>(stream, g, out, lse, q, k, v);
    case 64: return forward_impl<64>(stream, g, out, lse, q, k, v);
    case 80: return forward_impl<80>(stream, g, out, lse, q, k, v);
    case 96: return forward_impl<96>(stream, g, out, lse, q, k, v);
    case 128: return forward_impl<128>(stream, g, out, lse, q, k, v);
    case 160: return forward_impl<160>(stream, g, out, lse, q, k, v);
    case 192: return forward_impl<192>(stream, g, out, lse, q, k, v);
    case 224: return forward_impl<224>(stream, g, out, lse, q, k, v);
    default: return forward_impl<256>(stream, g, out, lse, q, k, v);
  }
}

void attention_backward(cudaStream_t stream, Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v,
                        Buf out, Buf lse, const AttentionShape& s) {
  constexpr const char* op = "attention_backward";
  check_attention_backward("cuda", d_q, d_k, d_v, d_out, q, k, v, out, lse, s);
  const Geometry g = check_geometry(op, s);
  const int D = s.D;
  if (s.q_elements() == 0) {  // no query rows: d_k and d_v are zero (as on the CPU)
    const std::size_t bytes = static_cast<std::size_t>(s.kv_elements()) * dtype_size(q.dtype);
    if (bytes > 0) {
      PTRAIN_CUDA_CHECK(cudaMemsetAsync(d_k.ptr, 0, bytes, stream));
      PTRAIN_CUDA_CHECK(cudaMemsetAsync(d_v.ptr, 0, bytes, stream));
    }
    return;
  }
  if (q.dtype == DType::BF16) {
    require_aligned(op, "d_q", d_q);
    require_aligned(op, "d_k", d_k);
    require_aligned(op, "d_v", d_v);
    require_aligned(op, "d_out", d_out);
    require_aligned(op, "q", q);
    require_aligned(op, "k", k);
    require_aligned(op, "v", v);
    require_aligned(op, "out", out);
  }
  switch (padded_head_dim(D)) {
    case 32: return backward_impl<32>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    case 64: return backward_impl<64>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    case 80: return backward_impl<80>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    case 96: return backward_impl<96>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    case 128: return backward_impl<128>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    case 160: return backward_impl<160>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    case 192: return backward_impl<192>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    case 224: return backward_impl<224>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
    default: return backward_impl<256>(stream, g, d_q, d_k, d_v, d_out, q, k, v, out, lse);
  }
}

}  // namespace ptrain::kernels::cuda
