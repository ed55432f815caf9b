// Causal attention with grouped-query heads, flash-style: no Tq x Tk matrix is ever stored.
// q, out: [B, Tq, Hq, D]; k, v: [B, Tk, Hkv, D]; lse: [B, Hq, Tq]; query head h reads kv head
// h / (Hq / Hkv); scale 1/sqrt(D); query row i sits at position q_pos0 + i and sees keys
// 0 .. min(q_pos0 + i, Tk - 1) (attention_shape.h).
//
// Forward, per (b, h, block of kRows query rows): walk the key blocks 0..last row's position with an online
// softmax (running max m, running sum l, unnormalised output acc rescaled by e^{m_old - m_new}),
// then out = acc / l and lse = m + log l.
// Backward, per (b, h), recomputes each block of probabilities from lse (P = e^{S - lse}) and
//   Dv_i = dot(d_out_i, out_i),  dP = d_out V^T,  dS = P (dP - Dv)
//   d_q = scale dS K,  d_k = scale dS^T q,  d_v = P^T d_out.
// d_k and d_v of a kv head collect from every query head of its group: with Hq == Hkv each task
// owns its slice of d_k/d_v; with groups, each task writes its own [Tk, D] scratch and a second
// pass sums a group's heads in head order. Either way the result is the same for any thread count.
//
// Layout for speed: a block's scores are kept transposed, sT[key][query row], computed as
// K (q scale)^T with the query block transposed once into scratch. Every product is then a
// register-tiled small GEMM whose inner loop runs over contiguous floats, K/V are read as rows
// (no transposes of K or V), and the softmax steps vectorise across the block's query rows.
// The per-task functions are multiversioned for AVX2/AVX-512 (isa.h).
// Dtypes as on CUDA (attention.cu): q, k, v, out and the d_ tensors share one element type, F32 or
// BF16 (staged, bf16_staging.h: the math stays fp32 throughout); lse is F32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

constexpr std::int64_t kRows = 32;  // query rows per block
constexpr std::int64_t kCols = 64;  // keys per block

struct Shape {
  std::int64_t B, Tq, Tk, pos0, Hq, Hkv, D;
  explicit Shape(const AttentionShape& s)
      : B(s.B), Tq(s.Tq), Tk(s.Tk), pos0(s.q_pos0), Hq(s.Hq), Hkv(s.Hkv), D(s.D) {}
  std::int64_t group() const { return Hq / Hkv; }
  std::int64_t q_count() const { return B * Tq * Hq * D; }    // elements of q, out, d_q, d_out
  std::int64_t kv_count() const { return B * Tk * Hkv * D; }  // of k, v, d_k, d_v
  // Offsets of row t of head h in [B, Tq, Hq, D] and [B, Tk, Hkv, D] tensors.
  std::int64_t q_row(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return ((b * Tq + t) * Hq + h) * D;
  }
  std::int64_t kv_row(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return ((b * Tk + t) * Hkv + h) * D;
  }
  std::int64_t lse_row(std::int64_t b, std::int64_t h) const { return (b * Hq + h) * Tq; }
};

// Attention on more work than this (B Hq Tq Tk D) runs on the OpenMP threads; below, a parallel
// region costs more than it saves.
constexpr std::int64_t kParallelMinWork = std::int64_t{1} << 20;

// The block products: c[i ldc + j] = (kAccumulate ? c[i ldc + j] : 0) + sum_k a(i, k) b[k ldb + j]
// for i < m, j < n, k < kd, with a(i, k) = a[i a_is + k a_ks] (so a may be read transposed).
// Register tiles of kTileM x kTileN outputs: each b row segment loaded once serves kTileM rows,
// and the accumulators stay in vector registers across k.
constexpr std::int64_t kTileM = 4;
constexpr std::int64_t kTileN = 16;

template <bool kAccumulate>
[[gnu::always_inline]] inline void small_gemm(float* c, std::int64_t ldc, const float* a, std::int64_t a_is,
                                              std::int64_t a_ks, const float* b, std::int64_t ldb,
                                              std::int64_t m, std::int64_t n, std::int64_t kd) {
  const std::int64_t n_main = n - n % kTileN;
  for (std::int64_t j = 0; j < n_main; j += kTileN) {
    std::int64_t i = 0;
    for (; i + kTileM <= m; i += kTileM) {
      float acc[kTileM][kTileN];
      for (std::int64_t ii = 0; ii < kTileM; ++ii) {
#pragma omp simd
        for (std::int64_t jj = 0; jj < kTileN; ++jj)
          acc[ii][jj] = kAccumulate ? c[(i + ii) * ldc + j + jj] : 0.0f;
      }
      for (std::int64_t k = 0; k < kd; ++k) {
        const float* bk = b + k * ldb + j;
#pragma GCC unroll 4
        for (std::int64_t ii = 0; ii < kTileM; ++ii) {
          const float av = a[(i + ii) * a_is + k * a_ks];
#pragma omp simd
          for (std::int64_t jj = 0; jj < kTileN; ++jj) acc[ii][jj] += av * bk[jj];
        }
      }
      for (std::int64_t ii = 0; ii < kTileM; ++ii) {
#pragma omp simd
        for (std::int64_t jj = 0; jj < kTileN; ++jj) c[(i + ii) * ldc + j + jj] = acc[ii][jj];
      }
    }
    for (; i < m; ++i) {  // leftover rows, one at a time
      float acc[kTileN];
#pragma omp simd
      for (std::int64_t jj = 0; jj < kTileN; ++jj) acc[jj] = kAccumulate ? c[i * ldc + j + jj] : 0.0f;
      for (std::int64_t k = 0; k < kd; ++k) {
        const float av = a[i * a_is + k * a_ks];
        const float* bk = b + k * ldb + j;
#pragma omp simd
        for (std::int64_t jj = 0; jj < kTileN; ++jj) acc[jj] += av * bk[jj];
      }
#pragma omp simd
      for (std::int64_t jj = 0; jj < kTileN; ++jj) c[i * ldc + j + jj] = acc[jj];
    }
  }
  if (n_main == n) return;
  const std::int64_t width = n - n_main;  // leftover columns, row by row
  for (std::int64_t i = 0; i < m; ++i) {
    float acc[kTileN];
    for (std::int64_t jj = 0; jj < width; ++jj) acc[jj] = kAccumulate ? c[i * ldc + n_main + jj] : 0.0f;
    for (std::int64_t k = 0; k < kd; ++k) {
      const float av = a[i * a_is + k * a_ks];
      const float* bk = b + k * ldb + n_main;
#pragma omp simd
      for (std::int64_t jj = 0; jj < width; ++jj) acc[jj] += av * bk[jj];
    }
    for (std::int64_t jj = 0; jj < width; ++jj) c[i * ldc + n_main + jj] = acc[jj];
  }
}

// Query rows [i0, i0 + rows) of (b, h): x transposed, xt[d kRows + r] = x[row i0 + r][d] * factor.
[[gnu::always_inline]] inline void load_transposed(float* xt, const float* x, const Shape& sh, std::int64_t b,
                                                   std::int64_t h, std::int64_t i0, std::int64_t rows,
                                                   float factor) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x + sh.q_row(b, i0 + r, h);
    for (std::int64_t d = 0; d < sh.D; ++d) xt[d * kRows + r] = row[d] * factor;
  }
}

struct ForwardScratch {
  std::vector<float> qt, st, acc, m, l, block_max, correction, block_sum;
  explicit ForwardScratch(std::int64_t D)
      : qt(D * kRows),
        st(kCols * kRows),
        acc(kRows * D),
        m(kRows),
        l(kRows),
        block_max(kRows),
        correction(kRows),
        block_sum(kRows) {}
};

// One block of query rows [i0, i0 + rows) of head h, batch b: writes its out rows and lse.
[[gnu::always_inline]] inline void forward_block_body(ForwardScratch& w, float* out, float* lse,
                                                      const float* q, const float* k, const float* v,
                                                      const Shape& sh, std::int64_t b, std::int64_t h,
                                                      std::int64_t i0) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t D = sh.D;
  const std::int64_t hk = h / sh.group();
  const std::int64_t rows = std::min(kRows, sh.Tq - i0);
  const std::int64_t ld = sh.Hkv * D;  // between consecutive keys of one head
  const float* k_head = k + sh.kv_row(b, 0, hk);
  const float* v_head = v + sh.kv_row(b, 0, hk);
  float* st = w.st.data();
  float* acc = w.acc.data();
  float* m = w.m.data();
  float* l = w.l.data();
  float* bmax = w.block_max.data();
  float* corr = w.correction.data();
  float* bsum = w.block_sum.data();
  load_transposed(w.qt.data(), q, sh, b, h, i0, rows, 1.0f / std::sqrt(static_cast<float>(D)));
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);
  std::fill(acc, acc + rows * D, 0.0f);
  // The last key any row of the block sees (every key, when the queries are past them all).
  const std::int64_t last = std::min(sh.pos0 + i0 + rows - 1, sh.Tk - 1);
  for (std::int64_t j0 = 0; j0 <= last; j0 += kCols) {
    const std::int64_t cols = std::min(kCols, last + 1 - j0);
    // sT[c][r] = k_{j0+c} . (q_{i0+r} scale)
    small_gemm<false>(st, kRows, k_head + j0 * ld, ld, 1, w.qt.data(), kRows, cols, rows, D);
    // Causal mask: key j0 + c is visible to row i0 + r iff c <= r + (pos0 + i0 - j0).
    const std::int64_t shift = sh.pos0 + i0 - j0;
    std::fill(bmax, bmax + rows, kNegInf);
    for (std::int64_t c = 0; c < cols; ++c) {
      const float* srow = st + c * kRows;
#pragma omp simd
      for (std::int64_t r = 0; r < rows; ++r) {
        const float x = c <= r + shift ? srow[r] : kNegInf;
        bmax[r] = x > bmax[r] ? x : bmax[r];
      }
    }
#pragma omp simd
    for (std::int64_t r = 0; r < rows; ++r) {
      const float m_new = bmax[r] > m[r] ? bmax[r] : m[r];  // finite: key 0 is always visible
      corr[r] = exp_f32(m[r] - m_new);
      m[r] = m_new;
      bsum[r] = 0.0f;
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      float* srow = st + c * kRows;
#pragma omp simd
      for (std::int64_t r = 0; r < rows; ++r) {
        const float p = c <= r + shift ? exp_f32(srow[r] - m[r]) : 0.0f;
        srow[r] = p;
        bsum[r] += p;
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      l[r] = l[r] * corr[r] + bsum[r];
      float* arow = acc + r * D;
      const float cr = corr[r];
#pragma omp simd
      for (std::int64_t d = 0; d < D; ++d) arow[d] *= cr;
    }
    // acc[r][:] += sum_c P[r][c] v_{j0+c}
    small_gemm<true>(acc, D, st, 1, kRows, v_head + j0 * ld, ld, rows, D, cols);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    float* orow = out + sh.q_row(b, i0 + r, h);
    const float inv_l = 1.0f / l[r];
#pragma omp simd
    for (std::int64_t d = 0; d < D; ++d) orow[d] = acc[r * D + d] * inv_l;
    if (lse) lse[sh.lse_row(b, h) + i0 + r] = m[r] + std::log(l[r]);
  }
}

struct BackwardScratch {
  std::vector<float> qt, dot, qs, dob, dq, pt, dst, lse, dv_dot;
  explicit BackwardScratch(std::int64_t D)
      : qt(D * kRows),
        dot(D * kRows),
        qs(kRows * D),
        dob(kRows * D),
        dq(kRows * D),
        pt(kCols * kRows),
        dst(kCols * kRows),
        lse(kRows),
        dv_dot(kRows) {}
};

// All query rows of head h, batch b. dk/dv: this task's accumulators, Tk rows of D with stride
// dkv_stride (zeroed here).
[[gnu::always_inline]] inline void backward_head_body(BackwardScratch& w, float* d_q, float* dk, float* dv,
                                                      std::int64_t dkv_stride, const float* d_out,
                                                      const float* q, const float* k, const float* v,
                                                      const float* out, const float* lse, const Shape& sh,
                                                      std::int64_t b, std::int64_t h) {
  const std::int64_t D = sh.D;
  const std::int64_t hk = h / sh.group();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::int64_t ld = sh.Hkv * D;  // between consecutive keys of one head
  const float* k_head = k + sh.kv_row(b, 0, hk);
  const float* v_head = v + sh.kv_row(b, 0, hk);
  float* qs = w.qs.data();
  float* dob = w.dob.data();
  float* dq = w.dq.data();
  float* pt = w.pt.data();
  float* dst = w.dst.data();
  float* row_lse = w.lse.data();
  float* row_dot = w.dv_dot.data();
  for (std::int64_t t = 0; t < sh.Tk; ++t) {
    std::fill(dk + t * dkv_stride, dk + t * dkv_stride + D, 0.0f);
    std::fill(dv + t * dkv_stride, dv + t * dkv_stride + D, 0.0f);
  }
  for (std::int64_t i0 = 0; i0 < sh.Tq; i0 += kRows) {
    const std::int64_t rows = std::min(kRows, sh.Tq - i0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t off = sh.q_row(b, i0 + r, h);
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t d = 0; d < D; ++d) {
        qs[r * D + d] = q[off + d] * scale;
        dob[r * D + d] = d_out[off + d];
        dot += d_out[off + d] * out[off + d];
      }
      row_dot[r] = dot;  // D_i = dot(d_out_i, out_i) = sum_j P_ij dP_ij
      row_lse[r] = lse[sh.lse_row(b, h) + i0 + r];
    }
    load_transposed(w.qt.data(), q, sh, b, h, i0, rows, scale);
    load_transposed(w.dot.data(), d_out, sh, b, h, i0, rows, 1.0f);
    std::fill(dq, dq + rows * D, 0.0f);
    const std::int64_t last = std::min(sh.pos0 + i0 + rows - 1, sh.Tk - 1);
    for (std::int64_t j0 = 0; j0 <= last; j0 += kCols) {
      const std::int64_t cols = std::min(kCols, last + 1 - j0);
      const float* k_block = k_head + j0 * ld;
      small_gemm<false>(pt, kRows, k_block, ld, 1, w.qt.data(), kRows, cols, rows, D);             // S^T
      small_gemm<false>(dst, kRows, v_head + j0 * ld, ld, 1, w.dot.data(), kRows, cols, rows, D);  // dP^T
      const std::int64_t shift = sh.pos0 + i0 - j0;
      for (std::int64_t c = 0; c < cols; ++c) {
        float* prow = pt + c * kRows;
        float* dsrow = dst + c * kRows;
#pragma omp simd
        for (std::int64_t r = 0; r < rows; ++r) {
          const float p = c <= r + shift ? exp_f32(prow[r] - row_lse[r]) : 0.0f;
          prow[r] = p;
          dsrow[r] = p * (dsrow[r] - row_dot[r]);
        }
      }
      // dq[r][:] += sum_c dS[r][c] k_{j0+c}
      small_gemm<true>(dq, D, dst, 1, kRows, k_block, ld, rows, D, cols);
      // d_k[c][:] += sum_r dS[r][c] (q_r scale),  d_v[c][:] += sum_r P[r][c] d_out_r
      small_gemm<true>(dk + j0 * dkv_stride, dkv_stride, dst, kRows, 1, qs, D, cols, D, rows);
      small_gemm<true>(dv + j0 * dkv_stride, dkv_stride, pt, kRows, 1, dob, D, cols, D, rows);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      float* dqrow = d_q + sh.q_row(b, i0 + r, h);
#pragma omp simd
      for (std::int64_t d = 0; d < D; ++d) dqrow[d] = dq[r * D + d] * scale;
    }
  }
}

PTRAIN_CPU_MULTIVERSION(forward_block, forward_block_body,
                        (ForwardScratch & w, float* out, float* lse, const float* q, const float* k,
                         const float* v, const Shape& sh, std::int64_t b, std::int64_t h, std::int64_t i0),
                        (w, out, lse, q, k, v, sh, b, h, i0))
PTRAIN_CPU_MULTIVERSION(backward_head, backward_head_body,
                        (BackwardScratch & w, float* d_q, float* dk, float* dv, std::int64_t dkv_stride,
                         const float* d_out, const float* q, const float* k, const float* v, const float* out,
                         const float* lse, const Shape& sh, std::int64_t b, std::int64_t h),
                        (w, d_q, dk, dv, dkv_stride, d_out, q, k, v, out, lse, sh, b, h))

}  // namespace

void attention_forward(Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& shape) {
  check_attention_forward("cpu", out, lse, q, k, v, shape);
  const Shape sh(shape);
  const std::int64_t heads = sh.B * sh.Hq;
  const std::int64_t blocks = (sh.Tq + kRows - 1) / kRows;
  const std::int64_t tasks = heads * blocks;
  if (tasks == 0) return;
  Bf16Staging staging;
  float* o = f32(staging.output(out, sh.q_count()));
  float* l = lse ? f32(lse) : nullptr;
  const float* qp = cf32(staging.input(q, sh.q_count()));
  const float* kp = cf32(staging.input(k, sh.kv_count()));
  const float* vp = cf32(staging.input(v, sh.kv_count()));
#pragma omp parallel if (heads * sh.Tq * sh.Tk * sh.D >= kParallelMinWork)
  {
    ForwardScratch scratch(sh.D);
    // Latest (most expensive) query blocks first, so that dynamic scheduling balances the causal
    // triangle; every task writes only its own rows.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::int64_t block = blocks - 1 - task / heads;
      const std::int64_t bh = task % heads;
      forward_block(scratch, o, l, qp, kp, vp, sh, bh / sh.Hq, bh % sh.Hq, block * kRows);
    }
  }
}

void attention_backward(Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                        const AttentionShape& shape) {
  check_attention_backward("cpu", d_q, d_k, d_v, d_out, q, k, v, out, lse, shape);
  const Shape sh(shape);
  const std::int64_t nq = sh.q_count(), nkv = sh.kv_count();
  const std::int64_t heads = sh.B * sh.Hq;
  const std::int64_t group = sh.group();
  if (heads == 0 || sh.Tk == 0) return;
  Bf16Staging staging;
  float* dq = f32(staging.output(d_q, nq));
  float* dk = f32(staging.output(d_k, nkv));
  float* dv = f32(staging.output(d_v, nkv));
  d_out = staging.input(d_out, nq);
  q = staging.input(q, nq);
  k = staging.input(k, nkv);
  v = staging.input(v, nkv);
  out = staging.input(out, nq);
  // With groups, per-query-head scratch [B, Hq, Tk, D] for d_k and d_v, summed afterwards.
  const std::int64_t head_rows = sh.Tk * sh.D;
  std::unique_ptr<float[]> partial;
  if (group > 1)
    partial = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(2 * heads * head_rows));
  float* pk = partial.get();
  float* pv = group > 1 ? pk + heads * head_rows : nullptr;
#pragma omp parallel if (heads * sh.Tq * sh.Tk * sh.D >= kParallelMinWork)
  {
    BackwardScratch scratch(sh.D);
#pragma omp for schedule(static)
    for (std::int64_t bh = 0; bh < heads; ++bh) {
      const std::int64_t b = bh / sh.Hq;
      const std::int64_t h = bh % sh.Hq;
      if (group > 1) {
        backward_head(scratch, dq, pk + bh * head_rows, pv + bh * head_rows, sh.D, cf32(d_out), cf32(q),
                      cf32(k), cf32(v), cf32(out), cf32(lse), sh, b, h);
      } else {
        backward_head(scratch, dq, dk + sh.kv_row(b, 0, h), dv + sh.kv_row(b, 0, h), sh.Hkv * sh.D,
                      cf32(d_out), cf32(q), cf32(k), cf32(v), cf32(out), cf32(lse), sh, b, h);
      }
    }
  }
  if (group == 1) return;
  // d_k[b, t, hk, :] = sum over the group's query heads, in head order.
  const std::int64_t kv_rows = sh.B * sh.Tk * sh.Hkv;
#pragma omp parallel for schedule(static) if (kv_rows * sh.D * group >= kParallelMinElements)
  for (std::int64_t row = 0; row < kv_rows; ++row) {
    const std::int64_t hk = row % sh.Hkv;
    const std::int64_t t = (row / sh.Hkv) % sh.Tk;
    const std::int64_t b = row / (sh.Hkv * sh.Tk);
    float* dkrow = dk + row * sh.D;
    float* dvrow = dv + row * sh.D;
    for (std::int64_t u = 0; u < group; ++u) {
      const std::int64_t off = ((b * sh.Hq + hk * group + u) * sh.Tk + t) * sh.D;
      if (u == 0) {
        std::copy(pk + off, pk + off + sh.D, dkrow);
        std::copy(pv + off, pv + off + sh.D, dvrow);
      } else {
#pragma omp simd
        for (std::int64_t d = 0; d < sh.D; ++d) {
          dkrow[d] += pk[off + d];
          dvrow[d] += pv[off + d];
        }
      }
    }
  }
}

}  // namespace ptrain::kernels::cpu
