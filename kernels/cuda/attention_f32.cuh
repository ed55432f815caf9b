// Causal GQA flash attention's fp32 kernels: the correctness reference path (attention.cu).
// Internal to kernels/cuda/attention.cu, which alone includes it (the design is described there).
#pragma once

#include "kernels/cuda/attention_common.cuh"

namespace ptrain::kernels::cuda::attention_detail {

// ------------------------------------------------------------------------------------------------
// F32 path: 32 x 32 tiles, 128 threads as 32 rows x 4 lanes (a row's 4 lanes are one quad of a
// warp, so row reductions are two shuffles and row-private shared data needs only __syncwarp).
// A thread owns columns cg + 4c of its row's scores and columns cg + 4d of its row's accumulator.

constexpr int kF32Tile = 32;

template <int kD>
struct F32Cfg {
  static constexpr int kLD = kD + 1;          // odd stride: rows land on distinct banks
  static constexpr int kPLD = kF32Tile + 1;   // score tiles
  static constexpr int kTileFloats = kF32Tile * kLD;
  static constexpr int kPerThread = kD / 4;   // accumulator columns per thread
};

// Rows [row0, row0 + kRows) of one head (row t at g + t*stride), zero-filled past T and past D.
template <int kRows, int kD>
__device__ __forceinline__ void load_tile_f32(float* s, const float* g, long long stride, int row0, int T,
                                              int D) {
  constexpr int kLD = F32Cfg<kD>::kLD;
  for (int idx = threadIdx.x; idx < kRows * kD; idx += kThreads) {
    const int r = idx / kD;
    const int d = idx - r * kD;
    const int t = row0 + r;
    s[r * kLD + d] = (t < T && d < D) ? g[static_cast<long long>(t) * stride + d] : 0.0f;
  }
}

template <int kD>
constexpr int fwd_f32_smem() {
  return (3 * F32Cfg<kD>::kTileFloats + kF32Tile * F32Cfg<kD>::kPLD) * 4;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    fwd_f32_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                   float* __restrict__ out, float* __restrict__ lse, int Tq, int Tk, int off, int Hq, int Hkv,
                   int D, int G, float scale_log2) {
  using C = F32Cfg<kD>;
  constexpr int kLD = C::kLD, kPLD = C::kPLD, kN = C::kPerThread;
  extern __shared__ float4 smem_f4[];
  float* Qs = reinterpret_cast<float*>(smem_f4);
  float* Ks = Qs + C::kTileFloats;
  float* Vs = Ks + C::kTileFloats;
  float* Ps = Vs + C::kTileFloats;

  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / G;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kF32Tile;  // latest (longest) tiles launch first
  const int r = threadIdx.x >> 2, cg = threadIdx.x & 3;
  const long long qstride = static_cast<long long>(Hq) * D, kvstride = static_cast<long long>(Hkv) * D;
  const float* qg = q + (static_cast<long long>(b) * Tq * Hq + h) * D;
  const float* kg = k + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const float* vg = v + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const int i = q0 + r;
  const int last = min(off + i, Tk - 1);  // the last key row i sees
  const int rows_end = min(q0 + kF32Tile, Tq);
  const int keys_end = min(off + rows_end, Tk);  // past the last key any row of the tile sees

  load_tile_f32<kF32Tile, kD>(Qs, qg, qstride, q0, Tq, D);
  float m = -INFINITY, l = 0.0f;
  float o[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) o[n] = 0.0f;

  for (int k0 = 0; k0 < keys_end; k0 += kF32Tile) {
    __syncthreads();  // the previous tile's K, V (and P) are no longer read
    load_tile_f32<kF32Tile, kD>(Ks, kg, kvstride, k0, Tk, D);
    load_tile_f32<kF32Tile, kD>(Vs, vg, kvstride, k0, Tk, D);
    __syncthreads();
    float s[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) s[c] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < kD; ++d) {
      const float qd = Qs[r * kLD + d];
#pragma unroll
      for (int c = 0; c < 8; ++c) s[c] = fmaf(qd, Ks[(cg + 4 * c) * kLD + d], s[c]);
    }
    float mx = m;
    // Row i sees the tile's columns up to last - k0 (compared so, not as k0 + column > last, which
    // makes ptxas spill at kD = 32).
    const int last_col = last - k0;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      s[c] = cg + 4 * c > last_col ? -INFINITY : s[c] * scale_log2;
      mx = fmaxf(mx, s[c]);
    }
    mx = quad_max(mx);
    const float mu = mx == -INFINITY ? 0.0f : mx;  // never -inf in practice: key 0 is always visible
    const float corr = exp2f(m - mu);
    float ps = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const float p = exp2f(s[c] - mu);
      Ps[r * kPLD + cg + 4 * c] = p;
      ps += p;
    }
    l = l * corr + quad_sum(ps);
    m = mx;
#pragma unroll
    for (int n = 0; n < kN; ++n) o[n] *= corr;
    __syncwarp();
#pragma unroll 4
    for (int c = 0; c < kF32Tile; ++c) {
      const float p = Ps[r * kPLD + c];
#pragma unroll
      for (int n = 0; n < kN; ++n) o[n] = fmaf(p, Vs[c * kLD + cg + 4 * n], o[n]);
    }
  }
  if (i < Tq) {
    const float inv = 1.0f / l;
    float* orow = out + ((static_cast<long long>(b) * Tq + i) * Hq + h) * D;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int d = cg + 4 * n;
      if (d < D) orow[d] = o[n] * inv;
    }
    if (lse != nullptr && cg == 0) lse[(static_cast<long long>(b) * Hq + h) * Tq + i] = (m + log2f(l)) * kLn2;
  }
}

template <int kD>
constexpr int dq_f32_smem() {
  return (4 * F32Cfg<kD>::kTileFloats + kF32Tile * F32Cfg<kD>::kPLD) * 4;
}

// d_q for one (query tile, head, batch); reads D_i from d_q's rows before overwriting them.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    dq_f32_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                  const float* __restrict__ d_out, const float* __restrict__ lse, float* d_q, int Tq, int Tk,
                  int off, int Hq, int Hkv, int D, int G, float scale_log2, float scale) {
  using C = F32Cfg<kD>;
  constexpr int kLD = C::kLD, kPLD = C::kPLD, kN = C::kPerThread;
  extern __shared__ float4 smem_f4[];
  float* Qs = reinterpret_cast<float*>(smem_f4);
  float* dOs = Qs + C::kTileFloats;
  float* Ks = dOs + C::kTileFloats;
  float* Vs = Ks + C::kTileFloats;
  float* dSs = Vs + C::kTileFloats;

  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / G;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kF32Tile;
  const int r = threadIdx.x >> 2, cg = threadIdx.x & 3;
  const long long qstride = static_cast<long long>(Hq) * D, kvstride = static_cast<long long>(Hkv) * D;
  const long long qhead = static_cast<long long>(b) * Tq * Hq + h;  // row (b, 0, h)
  const float* kg = k + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const float* vg = v + (static_cast<long long>(b) * Tk * Hkv + hk) * D;
  const int i = q0 + r;
  const int last = min(off + i, Tk - 1);  // the last key row i sees
  const int rows_end = min(q0 + kF32Tile, Tq);
  const int keys_end = min(off + rows_end, Tk);

  load_tile_f32<kF32Tile, kD>(Qs, q + qhead * D, qstride, q0, Tq, D);
  load_tile_f32<kF32Tile, kD>(dOs, d_out + qhead * D, qstride, q0, Tq, D);
  const float lse2 = i < Tq ? lse[(static_cast<long long>(b) * Hq + h) * Tq + i] * kLog2e : 0.0f;
  const float dvec = i < Tq ? *dvec_slot(d_q, qhead + static_cast<long long>(i) * Hq, D) : 0.0f;
  float dq[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) dq[n] = 0.0f;

  for (int k0 = 0; k0 < keys_end; k0 += kF32Tile) {
    __syncthreads();
    load_tile_f32<kF32Tile, kD>(Ks, kg, kvstride, k0, Tk, D);
    load_tile_f32<kF32Tile, kD>(Vs, vg, kvstride, k0, Tk, D);
    __syncthreads();
    float s[8], dp[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) s[c] = dp[c] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < kD; ++d) {
      const float qd = Qs[r * kLD + d];
      const float od = dOs[r * kLD + d];
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        s[c] = fmaf(qd, Ks[(cg + 4 * c) * kLD + d], s[c]);
        dp[c] = fmaf(od, Vs[(cg + 4 * c) * kLD + d], dp[c]);
      }
    }
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const float p = k0 + cg + 4 * c > last ? 0.0f : exp2f(fmaf(s[c], scale_log2, -lse2));
      dSs[r * kPLD + cg + 4 * c] = p * (dp[c] - dvec);
    }
    __syncwarp();
#pragma unroll 4
    for (int c = 0; c < kF32Tile; ++c) {
      const float ds = dSs[r * kPLD + c];
#pragma unroll
      for (int n = 0; n < kN; ++n) dq[n] = fmaf(ds, Ks[c * kLD + cg + 4 * n], dq[n]);
    }
  }
  if (i < Tq) {
    float* row = d_q + (qhead + static_cast<long long>(i) * Hq) * D;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int d = cg + 4 * n;
      if (d < D) row[d] = dq[n] * scale;
    }
  }
}

template <int kD>
constexpr int dkdv_f32_smem() {
  return (4 * F32Cfg<kD>::kTileFloats + 2 * kF32Tile * F32Cfg<kD>::kPLD + 2 * kF32Tile) * 4;
}

// d_k, d_v for one (key tile, kv head, batch), summed over the group's query heads.
// Threads: 32 key rows x 4 lanes; a lane owns query columns rg + 4r of the transposed scores.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    dkdv_f32_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                    const float* __restrict__ d_out, const float* __restrict__ lse, const float* d_q,
                    float* __restrict__ d_k, float* __restrict__ d_v, int Tq, int Tk, int off, int Hq,
                    int Hkv, int D, int G, float scale_log2, float scale) {
  using C = F32Cfg<kD>;
  constexpr int kLD = C::kLD, kPLD = C::kPLD, kN = C::kPerThread;
  extern __shared__ float4 smem_f4[];
  float* Ks = reinterpret_cast<float*>(smem_f4);
  float* Vs = Ks + C::kTileFloats;
  float* Qs = Vs + C::kTileFloats;
  float* dOs = Qs + C::kTileFloats;
  float* PTs = dOs + C::kTileFloats;
  float* dSTs = PTs + kF32Tile * kPLD;
  float* ls = dSTs + kF32Tile * kPLD;  // lse * log2(e) of the tile's query rows
  float* ds = ls + kF32Tile;           // D_i of the tile's query rows

  const int b = blockIdx.x / Hkv, hk = blockIdx.x % Hkv;
  const int j0 = blockIdx.y * kF32Tile;  // earliest (longest) key tiles launch first
  const int c = threadIdx.x >> 2, rg = threadIdx.x & 3;
  const int j = j0 + c;
  const long long qstride = static_cast<long long>(Hq) * D, kvstride = static_cast<long long>(Hkv) * D;
  const long long kvhead = static_cast<long long>(b) * Tk * Hkv + hk;
  load_tile_f32<kF32Tile, kD>(Ks, k + kvhead * D, kvstride, j0, Tk, D);
  load_tile_f32<kF32Tile, kD>(Vs, v + kvhead * D, kvstride, j0, Tk, D);

  float dk[kN], dv[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) dk[n] = dv[n] = 0.0f;
  // Query tiles from the first row that sees key j0 (row j0 - off: as j0 < Tk, row i sees it iff
  // j0 <= off + i) on; none for keys no row sees.
  const int first = max(j0 - off, 0) / kF32Tile * kF32Tile;
  const int nq = max((Tq - first + kF32Tile - 1) / kF32Tile, 0);
  const int total = G * nq;
  for (int it = 0; it < total; ++it) {
    const int u = it / nq;
    const int i0 = first + (it - u * nq) * kF32Tile;
    const int h = hk * G + u;
    const long long qhead = static_cast<long long>(b) * Tq * Hq + h;
    __syncthreads();  // the previous tile's Q, dO, P^T, dS^T are no longer read
    load_tile_f32<kF32Tile, kD>(Qs, q + qhead * D, qstride, i0, Tq, D);
    load_tile_f32<kF32Tile, kD>(dOs, d_out + qhead * D, qstride, i0, Tq, D);
    if (threadIdx.x < kF32Tile) {
      const int t = i0 + threadIdx.x;
      ls[threadIdx.x] = t < Tq ? lse[(static_cast<long long>(b) * Hq + h) * Tq + t] * kLog2e : 0.0f;
      ds[threadIdx.x] = t < Tq ? *dvec_slot(d_q, qhead + static_cast<long long>(t) * Hq, D) : 0.0f;
    }
    __syncthreads();
    float s[8], dp[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) s[x] = dp[x] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < kD; ++d) {
      const float kd = Ks[c * kLD + d];
      const float vd = Vs[c * kLD + d];
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        s[x] = fmaf(kd, Qs[(rg + 4 * x) * kLD + d], s[x]);
        dp[x] = fmaf(vd, dOs[(rg + 4 * x) * kLD + d], dp[x]);
      }
    }
#pragma unroll
    for (int x = 0; x < 8; ++x) {
      const int rl = rg + 4 * x;
      const int i = i0 + rl;
      const float p = (j > off + i || j >= Tk || i >= Tq) ? 0.0f : exp2f(fmaf(s[x], scale_log2, -ls[rl]));
      PTs[c * kPLD + rl] = p;
      dSTs[c * kPLD + rl] = p * (dp[x] - ds[rl]);
    }
    __syncwarp();
#pragma unroll 4
    for (int rl = 0; rl < kF32Tile; ++rl) {
      const float p = PTs[c * kPLD + rl];
      const float dsv = dSTs[c * kPLD + rl];
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        dv[n] = fmaf(p, dOs[rl * kLD + rg + 4 * n], dv[n]);
        dk[n] = fmaf(dsv, Qs[rl * kLD + rg + 4 * n], dk[n]);
      }
    }
  }
  if (j < Tk) {
    float* dkrow = d_k + (kvhead + static_cast<long long>(j) * Hkv) * D;
    float* dvrow = d_v + (kvhead + static_cast<long long>(j) * Hkv) * D;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int d = rg + 4 * n;
      if (d < D) {
        dkrow[d] = dk[n] * scale;
        dvrow[d] = dv[n];
      }
    }
  }
}

}  // namespace ptrain::kernels::cuda::attention_detail
