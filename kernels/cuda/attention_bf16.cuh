// Causal GQA flash attention's bf16 tensor-core kernels (attention.cu).
// Internal to kernels/cuda/attention.cu, which alone includes it (the design is described there).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_common.cuh"

namespace ptrain::kernels::cuda::attention_detail {

// ------------------------------------------------------------------------------------------------
// BF16 path: mma.sync.m16n8k16 (row.col, bf16 x bf16 -> f32), ldmatrix, cp.async.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), g = lane / 4, t = lane % 4:
//   A (16x16): reg0 = (row g,   cols 2t, 2t+1), reg1 = (row g+8, cols 2t..), reg2 = (row g, cols 2t+8..),
//              reg3 = (row g+8, cols 2t+8..); low half = lower column.
//   B (16x8):  reg0 = (rows k 2t, 2t+1, col n g), reg1 = (rows k 2t+8, 2t+9, col g).
//   C (16x8):  c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, cols 2t, 2t+1).
// Hence the C fragments of two adjacent n8 tiles, packed to bf16, are the A fragment of one k16 step.
// Shared tiles are row-major with a row stride of kD + 8 elements.

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; `valid` false zero-fills the destination (src-size 0, nothing read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// ldmatrix lane addresses (lane l gives the row address of matrix l / 8).
// A operand, 16 x 16 at (m0, k0) of a row-major [m][k] tile: matrices (m 0-7, k 0-7), (m 8-15, k 0-7),
// (m 0-7, k 8-15), (m 8-15, k 8-15) = regs 0..3 of the A fragment.
// Also: two B operands (n tiles n0, n0+8) of a 16 x 16 block at (k0, n0) of a row-major [k][n] tile,
// loaded with .trans: matrices (k 0-7, n 0-7), (k 8-15, n 0-7) = B regs 0, 1 of tile n0, then
// (k 0-7, n 8-15), (k 8-15, n 8-15) = B regs 0, 1 of tile n0 + 8.
__device__ __forceinline__ const bf16* frag_rowmajor(const bf16* s, int ld, int r0, int c0, int lane) {
  return s + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + c0 + (lane >> 4) * 8;
}
// Two B operands (n tiles n0, n0 + 8, k16 at k0) of a row-major [n][k] tile (i.e. B^T stored, as K is
// for S = Q K^T), no .trans: matrices (n 0-7, k 0-7), (n 0-7, k 8-15) = tile n0; (n 8-15, k 0-7),
// (n 8-15, k 8-15) = tile n0 + 8.
__device__ __forceinline__ const bf16* frag_b_nk(const bf16* s, int ld, int n0, int k0, int lane) {
  return s + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8;
}

// acc[kNT][4] (rows m x kNT*8 cols) += A (16 x kD, row-major tile at row a_row0) x B^T where B^T is a
// row-major [n][kD] tile (rows 0 .. kNT*8): S = Q K^T style.
template <int kD, int kNT>
__device__ __forceinline__ void gemm_abt(float (&acc)[kNT][4], const bf16* a, int a_row0, const bf16* bt,
                                         int lane) {
  constexpr int kLD = kD + 8;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    std::uint32_t af[4];
    ldsm_x4(af, frag_rowmajor(a, kLD, a_row0, ks * 16, lane));
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      std::uint32_t bfr[4];
      ldsm_x4(bfr, frag_b_nk(bt, kLD, np * 16, ks * 16, lane));
      mma_bf16(acc[2 * np], af, bfr[0], bfr[1]);
      mma_bf16(acc[2 * np + 1], af, bfr[2], bfr[3]);
    }
  }
}

// For each of kMT 16-row tiles mt: acc[mt] (16 x kDo) += P[mt] (16 x kK, the C fragments p[mt][kK/8][4],
// rounded to bf16) x B, B kDo columns of a row-major [kK][kD] tile (`b` points at the first of them):
// O += P V style. Each B fragment read from shared memory feeds all kMT tiles.
template <int kD, int kDo, int kK, int kMT>
__device__ __forceinline__ void gemm_pb_tiles(float (&acc)[kMT][kDo / 8][4], const float (&p)[kMT][kK / 8][4],
                                              const bf16* b, int lane) {
  constexpr int kLD = kD + 8;
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    std::uint32_t af[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      af[mt][0] = pack_bf16(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      af[mt][1] = pack_bf16(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      af[mt][2] = pack_bf16(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      af[mt][3] = pack_bf16(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < kDo / 16; ++dp) {
      std::uint32_t bfr[4];
      ldsm_x4_trans(bfr, frag_rowmajor(b, kLD, kk * 16, dp * 16, lane));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_bf16(acc[mt][2 * dp], af[mt], bfr[0], bfr[1]);
        mma_bf16(acc[mt][2 * dp + 1], af[mt], bfr[2], bfr[3]);
      }
    }
  }
}

// gemm_pb_tiles for one tile.
template <int kD, int kDo, int kK>
__device__ __forceinline__ void gemm_pb(float (&acc)[kDo / 8][4], const float (&p)[kK / 8][4], const bf16* b,
                                        int lane) {
  gemm_pb_tiles<kD, kDo, kK, 1>(reinterpret_cast<float (&)[1][kDo / 8][4]>(acc),
                                reinterpret_cast<const float (&)[1][kK / 8][4]>(p), b, lane);
}

// Rows [row0, row0 + kRows) of one head (row t at g + t*stride) into a [kRows][kD + 8] tile, 16 bytes per
// cp.async, zero-filled past T and past D (D is a multiple of 8: a chunk is all in or all out).
template <int kRows, int kD>
__device__ __forceinline__ void load_tile_bf16(bf16* s, const bf16* g, long long stride, int row0, int T,
                                               int D) {
  constexpr int kChunks = kD / 8, kLD = kD + 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int ch = idx - r * kChunks;
    const int t = row0 + r;
    const bool ok = t < T && ch * 8 < D;
    cp_async16(s + r * kLD + ch * 8, ok ? g + static_cast<long long>(t) * stride + ch * 8 : g, ok);
  }
}

__device__ __forceinline__ void store_bf16x2(bf16* p, float lo, float hi) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(lo, hi);
}

template <int kD>
__device__ __forceinline__ void zero(float (&a)[kD][4]) {
#pragma unroll
  for (int i = 0; i < kD; ++i) a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.0f;
}

// The columns one bf16 CTA accumulates (O, dQ, dK and dV): the whole head up to kD = 128, above it one of
// two halves (blockIdx.z), so that a thread's accumulators never outgrow their kD = 128 size. Halves of
// 160, 192, 224 and 256 are multiples of 16, as the P V GEMM's k16 steps need.
template <int kD>
__host__ __device__ constexpr int out_chunks() {
  return kD > 128 ? 2 : 1;
}
template <int kD>
__host__ __device__ constexpr int out_cols() {
  return kD / out_chunks<kD>();
}

// Each forward warp owns fwd_tiles 16-row tiles of queries, so every K and V fragment it reads from
// shared memory feeds that many MMAs: at one tile per warp the kernel is bound by shared-memory reads.
// Two for D <= 96; at D = 128 two tiles' accumulators would not fit in 255 registers.
template <int kD>
__host__ __device__ constexpr int fwd_tiles() {
  return kD <= 96 ? 2 : 1;
}
template <int kD>
__host__ __device__ constexpr int fwd_rows() {  // query rows per forward CTA: 4 warps' tiles
  return 4 * 16 * fwd_tiles<kD>();
}
constexpr int kFwdCols = 64;  // keys per forward step

template <int kD>
constexpr int fwd_bf16_smem() {
  return (fwd_rows<kD>() + 2 * kFwdCols) * (kD + 8) * 2;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    fwd_bf16_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                    bf16* __restrict__ out, float* __restrict__ lse, int Tq, int Tk, int off, int Hq, int Hkv,
                    int D, int G, float scale_log2) {
  constexpr int kLD = kD + 8, kKS = kD / 16, kNT = kFwdCols / 8, kDo = out_cols<kD>(), kDT = kDo / 8;
  constexpr int kFwdTiles = fwd_tiles<kD>(), kFwdRows = fwd_rows<kD>();
  const int c0 = static_cast<int>(blockIdx.z) * kDo;  // the output columns of this CTA
  extern __shared__ float4 smem_f4[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_f4);
  bf16* Ks = Qs + kFwdRows * kLD;
  bf16* Vs = Ks + kFwdCols * kLD;

  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / G;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kFwdRows;  // latest (longest) tiles launch first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
  const long long qstride = static_cast<long long>(Hq) * D, kvstride = static_cast<long long>(Hkv) * D;
  const long long qhead = static_cast<long long>(b) * Tq * Hq + h;
  const bf16* kg = k + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const bf16* vg = v + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const int rows_end = min(q0 + kFwdRows, Tq);
  // Key tiles up to the diagonal or the last key, whichever comes first.
  const int n_kt = (min(off + rows_end, Tk) + kFwdCols - 1) / kFwdCols;
  const int warp_row0 = q0 + warp * 16 * kFwdTiles;

  load_tile_bf16<kFwdRows, kD>(Qs, q + qhead * D, qstride, q0, Tq, D);
  load_tile_bf16<kFwdCols, kD>(Ks, kg, kvstride, 0, Tk, D);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  std::uint32_t qf[kFwdTiles][kKS][4];  // this warp's query rows, kept in registers
#pragma unroll
  for (int mt = 0; mt < kFwdTiles; ++mt) {
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks)
      ldsm_x4(qf[mt][ks], frag_rowmajor(Qs, kLD, warp * 16 * kFwdTiles + mt * 16, ks * 16, lane));
  }

  // Per tile mt: rows a = warp_row0 + 16 mt + g and b = a + 8 of this thread.
  float o[kFwdTiles][kDT][4];
  float m_a[kFwdTiles], m_b[kFwdTiles];  // running max of rows a, b (log2 units)
  float l_a[kFwdTiles], l_b[kFwdTiles];  // this thread's part of the running sums
#pragma unroll
  for (int mt = 0; mt < kFwdTiles; ++mt) {
    zero(o[mt]);
    m_a[mt] = m_b[mt] = -INFINITY;
    l_a[mt] = l_b[mt] = 0.0f;
  }

  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kFwdCols;
    // V_kt streams in while S = Q K_kt^T is computed.
    load_tile_bf16<kFwdCols, kD>(Vs, vg, kvstride, k0, Tk, D);
    cp_async_commit();

    float s[kFwdTiles][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kFwdTiles; ++mt) zero(s[mt]);
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        std::uint32_t bfr[4];
        ldsm_x4(bfr, frag_b_nk(Ks, kLD, np * 16, ks * 16, lane));
#pragma unroll
        for (int mt = 0; mt < kFwdTiles; ++mt) {
          mma_bf16(s[mt][2 * np], qf[mt][ks], bfr[0], bfr[1]);
          mma_bf16(s[mt][2 * np + 1], qf[mt][ks], bfr[2], bfr[3]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kFwdTiles; ++mt) {
      const int tile_row0 = warp_row0 + mt * 16;
      const int row_a = tile_row0 + g, row_b = row_a + 8;
      // Masked where some key of the step is past the last one some row of the tile sees,
      // min(off + row, Tk - 1): later than the first row's position, or past the keys (the padding of
      // the step that holds key Tk - 1).
      const bool masked = k0 + kFwdCols - 1 > off + tile_row0 || k0 + kFwdCols > Tk;
      const int last_a = min(off + row_a, Tk - 1), last_b = min(off + row_b, Tk - 1);
      float mx_a = m_a[mt], mx_b = m_b[mt];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[mt][nt][e] * scale_log2;
          if (masked && k0 + nt * 8 + tg * 2 + (e & 1) > (e < 2 ? last_a : last_b)) x = -INFINITY;
          s[mt][nt][e] = x;
        }
        mx_a = fmaxf(mx_a, fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
      mx_a = quad_max(mx_a);
      mx_b = quad_max(mx_b);
      const float mu_a = mx_a == -INFINITY ? 0.0f : mx_a;
      const float mu_b = mx_b == -INFINITY ? 0.0f : mx_b;
      const float corr_a = exp2f(m_a[mt] - mu_a), corr_b = exp2f(m_b[mt] - mu_b);
      m_a[mt] = mx_a;
      m_b[mt] = mx_b;
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        s[mt][nt][0] = exp2f(s[mt][nt][0] - mu_a);
        s[mt][nt][1] = exp2f(s[mt][nt][1] - mu_a);
        s[mt][nt][2] = exp2f(s[mt][nt][2] - mu_b);
        s[mt][nt][3] = exp2f(s[mt][nt][3] - mu_b);
        sum_a += s[mt][nt][0] + s[mt][nt][1];
        sum_b += s[mt][nt][2] + s[mt][nt][3];
      }
      l_a[mt] = l_a[mt] * corr_a + sum_a;
      l_b[mt] = l_b[mt] * corr_b + sum_b;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        o[mt][dt][0] *= corr_a;
        o[mt][dt][1] *= corr_a;
        o[mt][dt][2] *= corr_b;
        o[mt][dt][3] *= corr_b;
      }
    }
    __syncthreads();  // every warp is done with K_kt: K_kt+1 streams in while O += P V_kt
    if (kt + 1 < n_kt) load_tile_bf16<kFwdCols, kD>(Ks, kg, kvstride, k0 + kFwdCols, Tk, D);
    cp_async_commit();
    cp_async_wait<1>();  // V_kt has landed (only K_kt+1 may be in flight)
    __syncthreads();
    gemm_pb_tiles<kD, kDo, kFwdCols, kFwdTiles>(o, s, Vs + c0, lane);
    cp_async_wait<0>();
    __syncthreads();  // K_kt+1 has landed, and every warp is done with V_kt
  }

  bf16* og = out + qhead * D;
  float* lrow = lse != nullptr ? lse + (static_cast<long long>(b) * Hq + h) * Tq : nullptr;
#pragma unroll
  for (int mt = 0; mt < kFwdTiles; ++mt) {
    const int row_a = warp_row0 + mt * 16 + g, row_b = row_a + 8;
    const float sum_a = quad_sum(l_a[mt]), sum_b = quad_sum(l_b[mt]);
    const float inv_a = 1.0f / sum_a, inv_b = 1.0f / sum_b;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      const int col = c0 + dt * 8 + tg * 2;
      if (col < D) {
        if (row_a < Tq) store_bf16x2(og + row_a * qstride + col, o[mt][dt][0] * inv_a, o[mt][dt][1] * inv_a);
        if (row_b < Tq) store_bf16x2(og + row_b * qstride + col, o[mt][dt][2] * inv_b, o[mt][dt][3] * inv_b);
      }
    }
    if (lrow != nullptr && tg == 0 && blockIdx.z == 0) {  // every chunk's CTA has the same statistics
      if (row_a < Tq) lrow[row_a] = (m_a[mt] + log2f(sum_a)) * kLn2;
      if (row_b < Tq) lrow[row_b] = (m_b[mt] + log2f(sum_b)) * kLn2;
    }
  }
}

constexpr int kDkdvCols = 64;  // keys per dK/dV CTA (4 warps x 16)
template <int kD>
__host__ __device__ constexpr int dkdv_rows() {  // query rows per dK/dV step
  return kD <= 64 ? 64 : 32;
}
template <int kD>
constexpr int dkdv_bf16_smem() {
  return (2 * kDkdvCols + 4 * dkdv_rows<kD>()) * (kD + 8) * 2 + 4 * dkdv_rows<kD>() * 4;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    dkdv_bf16_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                     const bf16* __restrict__ d_out, const float* __restrict__ lse, const bf16* d_q,
                     bf16* __restrict__ d_k, bf16* __restrict__ d_v, int Tq, int Tk, int off, int Hq, int Hkv,
                     int D, int G, float scale_log2, float scale) {
  constexpr int kBr = dkdv_rows<kD>(), kLD = kD + 8, kNT = kBr / 8, kDo = out_cols<kD>(), kDT = kDo / 8;
  const int c0 = static_cast<int>(blockIdx.z) * kDo;  // the d_k, d_v columns of this CTA
  extern __shared__ float4 smem_f4[];
  bf16* Ks = reinterpret_cast<bf16*>(smem_f4);
  bf16* Vs = Ks + kDkdvCols * kLD;
  bf16* Qs = Vs + kDkdvCols * kLD;  // [2][kBr][kLD]
  bf16* dOs = Qs + 2 * kBr * kLD;   // [2][kBr][kLD]
  float* ls = reinterpret_cast<float*>(dOs + 2 * kBr * kLD);  // [2][kBr] lse (natural log)
  float* dd = ls + 2 * kBr;                                   // [2][kBr] D_i

  const int b = blockIdx.x / Hkv, hk = blockIdx.x % Hkv;
  const int j0 = blockIdx.y * kDkdvCols;  // earliest (longest) key tiles launch first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
  const long long qstride = static_cast<long long>(Hq) * D, kvstride = static_cast<long long>(Hkv) * D;
  const long long kvhead = static_cast<long long>(b) * Tk * Hkv + hk;
  // Query tiles from the first row that sees key j0 (row j0 - off: as j0 < Tk, row i sees it iff
  // j0 <= off + i) on; none for keys no row sees.
  const int first = max(j0 - off, 0) / kBr * kBr;
  const int nq = max((Tq - first + kBr - 1) / kBr, 0);
  const int total = G * nq;                 // x the group's query heads
  const int key_a = j0 + warp * 16 + g, key_b = key_a + 8;

  auto issue = [&](int it, int buf) {
    const int u = it / nq;
    const int i0 = first + (it - u * nq) * kBr;
    const int h = hk * G + u;
    const long long qhead = static_cast<long long>(b) * Tq * Hq + h;
    load_tile_bf16<kBr, kD>(Qs + buf * kBr * kLD, q + qhead * D, qstride, i0, Tq, D);
    load_tile_bf16<kBr, kD>(dOs + buf * kBr * kLD, d_out + qhead * D, qstride, i0, Tq, D);
    for (int idx = threadIdx.x; idx < kBr; idx += kThreads) {
      const int t = i0 + idx;
      const bool ok = t < Tq;
      cp_async4(ls + buf * kBr + idx, ok ? lse + (static_cast<long long>(b) * Hq + h) * Tq + t : lse, ok);
      cp_async4(dd + buf * kBr + idx, ok ? d_q + (qhead + static_cast<long long>(t) * Hq) * D : d_q, ok);
    }
  };

  if (total > 0) {  // else no query sees these keys: their d_k, d_v are the zeros stored below
    load_tile_bf16<kDkdvCols, kD>(Ks, k + kvhead * D, kvstride, j0, Tk, D);
    load_tile_bf16<kDkdvCols, kD>(Vs, v + kvhead * D, kvstride, j0, Tk, D);
    issue(0, 0);
  }
  cp_async_commit();

  float dk[kDT][4], dv[kDT][4];
  zero(dk);
  zero(dv);
  for (int it = 0; it < total; ++it) {
    const int buf = it & 1;
    if (it + 1 < total) issue(it + 1, buf ^ 1);  // the next step streams in during this one
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int u = it / nq;
    const int i0 = first + (it - u * nq) * kBr;
    const bf16* Qb = Qs + buf * kBr * kLD;
    const bf16* dOb = dOs + buf * kBr * kLD;
    const float* lb = ls + buf * kBr;
    const float* db = dd + buf * kBr;

    // S^T = K_w Q^T (16 keys x kBr queries), then P^T = exp(S^T scale - lse), causal + Tq + Tk mask
    // (keys past Tk, the last tile's padding, are never stored: masked so that they hold zeros too).
    float st[kNT][4];
    zero(st);
    gemm_abt<kD, kNT>(st, Ks, warp * 16, Qb, lane);
    const bool masked = j0 + warp * 16 + 15 > off + i0 || i0 + kBr > Tq || j0 + warp * 16 + 16 > Tk;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ci = nt * 8 + tg * 2 + (e & 1);
        const int i = i0 + ci;
        float p = exp2f(fmaf(st[nt][e], scale_log2, -lb[ci] * kLog2e));
        const int key = e < 2 ? key_a : key_b;
        if (masked && (key > off + i || key >= Tk || i >= Tq)) p = 0.0f;
        st[nt][e] = p;
      }
    }
    gemm_pb<kD, kDo, kBr>(dv, st, dOb + c0, lane);  // dV += P^T dO
    // dP^T = V_w dO^T, dS^T = P^T (dP^T - D)
    float dpt[kNT][4];
    zero(dpt);
    gemm_abt<kD, kNT>(dpt, Vs, warp * 16, dOb, lane);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[nt][e] = st[nt][e] * (dpt[nt][e] - db[nt * 8 + tg * 2 + (e & 1)]);
    }
    gemm_pb<kD, kDo, kBr>(dk, dpt, Qb + c0, lane);  // dK += dS^T Q
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }

  bf16* dkg = d_k + kvhead * D;
  bf16* dvg = d_v + kvhead * D;
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) {
    const int col = c0 + dt * 8 + tg * 2;
    if (col < D) {
      if (key_a < Tk) {
        store_bf16x2(dkg + key_a * kvstride + col, dk[dt][0] * scale, dk[dt][1] * scale);
        store_bf16x2(dvg + key_a * kvstride + col, dv[dt][0], dv[dt][1]);
      }
      if (key_b < Tk) {
        store_bf16x2(dkg + key_b * kvstride + col, dk[dt][2] * scale, dk[dt][3] * scale);
        store_bf16x2(dvg + key_b * kvstride + col, dv[dt][2], dv[dt][3]);
      }
    }
  }
}

constexpr int kDqRows = 64;  // query rows per dQ CTA (4 warps x 16)
template <int kD>
__host__ __device__ constexpr int dq_cols() {  // keys per dQ step
  return kD <= 64 ? 64 : 32;
}
template <int kD>
constexpr int dq_bf16_smem() {
  return (2 * kDqRows + 4 * dq_cols<kD>()) * (kD + 8) * 2;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    dq_bf16_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                   const bf16* __restrict__ d_out, const float* __restrict__ lse, bf16* d_q, int Tq, int Tk,
                   int off, int Hq, int Hkv, int D, int G, float scale_log2, float scale) {
  constexpr int kBc = dq_cols<kD>(), kLD = kD + 8, kNT = kBc / 8, kDo = out_cols<kD>(), kDT = kDo / 8;
  const int c0 = static_cast<int>(blockIdx.z) * kDo;  // the d_q columns of this CTA
  extern __shared__ float4 smem_f4[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_f4);
  bf16* dOs = Qs + kDqRows * kLD;
  bf16* Ks = dOs + kDqRows * kLD;  // [2][kBc][kLD]
  bf16* Vs = Ks + 2 * kBc * kLD;   // [2][kBc][kLD]

  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / G;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kDqRows;  // latest (longest) tiles launch first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
  const long long qstride = static_cast<long long>(Hq) * D, kvstride = static_cast<long long>(Hkv) * D;
  const long long qhead = static_cast<long long>(b) * Tq * Hq + h;
  const bf16* kg = k + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const bf16* vg = v + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const int rows_end = min(q0 + kDqRows, Tq);
  const int n_kt = (min(off + rows_end, Tk) + kBc - 1) / kBc;  // up to the diagonal or the last key
  const int warp_row0 = q0 + warp * 16;
  const int row_a = warp_row0 + g, row_b = row_a + 8;
  const int last_a = min(off + row_a, Tk - 1), last_b = min(off + row_b, Tk - 1);  // their last keys

  load_tile_bf16<kDqRows, kD>(Qs, q + qhead * D, qstride, q0, Tq, D);
  load_tile_bf16<kDqRows, kD>(dOs, d_out + qhead * D, qstride, q0, Tq, D);
  load_tile_bf16<kBc, kD>(Ks, kg, kvstride, 0, Tk, D);
  load_tile_bf16<kBc, kD>(Vs, vg, kvstride, 0, Tk, D);
  cp_async_commit();
  // Row statistics; D_i is read from the slot in d_q's columns c0.. here, before this CTA (their only
  // writer) stores them.
  const float* lrow = lse + (static_cast<long long>(b) * Hq + h) * Tq;
  const float lse_a = row_a < Tq ? lrow[row_a] * kLog2e : 0.0f;
  const float lse_b = row_b < Tq ? lrow[row_b] * kLog2e : 0.0f;
  const float dd_a = row_a < Tq ? *dvec_slot(d_q, qhead + static_cast<long long>(row_a) * Hq, D, c0) : 0.0f;
  const float dd_b = row_b < Tq ? *dvec_slot(d_q, qhead + static_cast<long long>(row_b) * Hq, D, c0) : 0.0f;

  float dq[kDT][4];
  zero(dq);
  for (int kt = 0; kt < n_kt; ++kt) {
    const int buf = kt & 1;
    const int k0 = kt * kBc;
    if (kt + 1 < n_kt) {
      load_tile_bf16<kBc, kD>(Ks + (buf ^ 1) * kBc * kLD, kg, kvstride, k0 + kBc, Tk, D);
      load_tile_bf16<kBc, kD>(Vs + (buf ^ 1) * kBc * kLD, vg, kvstride, k0 + kBc, Tk, D);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16* Kb = Ks + buf * kBc * kLD;
    const bf16* Vb = Vs + buf * kBc * kLD;

    float s[kNT][4], dp[kNT][4];
    zero(s);
    zero(dp);
    gemm_abt<kD, kNT>(s, Qs, warp * 16, Kb, lane);   // S = Q_w K^T
    gemm_abt<kD, kNT>(dp, dOs, warp * 16, Vb, lane);  // dP = dO_w V^T
    const bool masked = k0 + kBc - 1 > off + warp_row0 || k0 + kBc > Tk;  // as in the forward
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool ra = e < 2;
        float p = exp2f(fmaf(s[nt][e], scale_log2, -(ra ? lse_a : lse_b)));
        if (masked && k0 + nt * 8 + tg * 2 + (e & 1) > (ra ? last_a : last_b)) p = 0.0f;
        s[nt][e] = p * (dp[nt][e] - (ra ? dd_a : dd_b));  // dS
      }
    }
    gemm_pb<kD, kDo, kBc>(dq, s, Kb + c0, lane);  // dQ += dS K
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }

  bf16* dqg = d_q + qhead * D;
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) {
    const int col = c0 + dt * 8 + tg * 2;
    if (col < D) {
      if (row_a < Tq) store_bf16x2(dqg + row_a * qstride + col, dq[dt][0] * scale, dq[dt][1] * scale);
      if (row_b < Tq) store_bf16x2(dqg + row_b * qstride + col, dq[dt][2] * scale, dq[dt][3] * scale);
    }
  }
}

}  // namespace ptrain::kernels::cuda::attention_detail
