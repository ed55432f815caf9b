// cuDNN fused attention (see cudnn_attention.h).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/cudnn_attention_check.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {
namespace {

using cudnn::Graph;
using Uid = Graph::Uid;
using Dims = std::vector<std::int64_t>;

// cuDNN's [b, h, s, d] view of ptrain's [B, T, H, D].
Dims bshd_strides(std::int64_t T, std::int64_t H, std::int64_t D) {
  return {T * H * D, D, H * D, 1};
}
// The same with the last two dims swapped: [b, h, d, s] (K^T, V^T).
Dims bshd_strides_transposed(std::int64_t T, std::int64_t H, std::int64_t D) {
  return {T * H * D, D, 1, H * D};
}

struct Sizes {
  std::int64_t B, Hq, Hkv, Tq, Tk, D;
  explicit Sizes(const AttentionShape& s) : B(s.B), Hq(s.Hq), Hkv(s.Hkv), Tq(s.Tq), Tk(s.Tk), D(s.D) {}
  Dims scores() const { return {B, Hq, Tq, Tk}; }
  Dims scores_strides() const { return {Hq * Tq * Tk, Tq * Tk, Tk, 1}; }
  Dims rows() const { return {B, Hq, Tq, 1}; }  // one value per query row: lse, row sums
  Dims rows_strides() const { return {Hq * Tq, Tq, 1, 1}; }
};

// The causal mask on scores `x` (attention_mask): keeps x where row (+ q_pos0) >= col, -inf elsewhere;
// the shift's by-value INT32 scalar goes to `shift`. The operations in cuDNN's frontend's order.
Uid causal_mask(Graph& g, const Sizes& z, AttentionMask mask, Uid x, Uid& shift) {
  if (mask == AttentionMask::None) return x;
  Uid row = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, row, CUDNN_DATA_FLOAT, -1, -1, 2);
  const Uid col = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, col, CUDNN_DATA_FLOAT, -1, -1, 3);
  if (mask == AttentionMask::Shifted) {
    const Uid shifted = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_INT32);
    shift = g.scalar_int32(0);  // the shape's q_pos0, given at each run
    g.pointwise(CUDNN_POINTWISE_ADD, row, shifted, CUDNN_DATA_INT32, shift);
    row = shifted;
  }
  const Uid keep = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, CUDNN_DATA_BOOLEAN, col);
  const Uid masked = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, masked, CUDNN_DATA_FLOAT,
              g.scalar(-std::numeric_limits<float>::infinity()), keep);
  return masked;
}

// An F32 virtual tensor of the scores' shape holding op(x[, b]).
Uid scores_op(Graph& g, const Sizes& z, cudnnPointwiseMode_t mode, Uid x, Uid b = -1) {
  const Uid y = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(mode, x, y, CUDNN_DATA_FLOAT, b);
  return y;
}

float softmax_scale(const AttentionShape& s) {
  return 1.0f / std::sqrt(static_cast<float>(s.D));
}

// cuDNN's tensors are declared 16-byte aligned.
bool aligned(Buf b) {
  return reinterpret_cast<std::uintptr_t>(b.ptr) % 16 == 0;
}

// Whether the cuDNN path may take the call at all (the own kernels take the rest, and raise the
// argument errors): BF16, something to compute, a head dim the CUDA backend takes, every tensor
// aligned; not a single query against a single key (cuDNN's frontend refuses its backward).
bool eligible(std::initializer_list<Buf> bufs, const AttentionShape& s) {
  if (bufs.begin()->dtype != DType::BF16 || s.q_elements() == 0 || s.kv_elements() == 0) return false;
  if (s.D % kCudaHeadDimStep != 0 || s.D > kCudaMaxHeadDim || (s.Tq == 1 && s.Tk == 1)) return false;
  for (const Buf& b : bufs) {
    if (b.ptr != nullptr && !aligned(b)) return false;
  }
  return cudnn_attention_mode() != CudnnAttentionMode::Off;
}

}  // namespace

AttentionMask attention_mask(const AttentionShape& s) {
  if (s.q_pos0 >= s.Tk - 1) return AttentionMask::None;  // every row sees every key
  return s.q_pos0 == 0 ? AttentionMask::Causal : AttentionMask::Shifted;
}

AttentionForwardGraph attention_forward_graph(const AttentionShape& s) {
  const Sizes z(s);
  AttentionForwardGraph f;
  Graph& g = f.graph;
  f.q = g.tensor({z.B, z.Hq, z.Tq, z.D}, bshd_strides(z.Tq, z.Hq, z.D), CUDNN_DATA_BFLOAT16);
  f.k = g.tensor({z.B, z.Hkv, z.D, z.Tk}, bshd_strides_transposed(z.Tk, z.Hkv, z.D), CUDNN_DATA_BFLOAT16);
  f.v = g.tensor({z.B, z.Hkv, z.Tk, z.D}, bshd_strides(z.Tk, z.Hkv, z.D), CUDNN_DATA_BFLOAT16);
  f.out = g.tensor({z.B, z.Hq, z.Tq, z.D}, bshd_strides(z.Tq, z.Hq, z.D), CUDNN_DATA_BFLOAT16);
  f.lse = g.tensor(z.rows(), z.rows_strides(), CUDNN_DATA_FLOAT);

  const Uid scores = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_FLOAT);
  g.matmul(f.q, f.k, scores);
  const Uid scaled = scores_op(g, z, CUDNN_POINTWISE_MUL, scores, g.scalar(softmax_scale(s)));
  const Uid masked = causal_mask(g, z, attention_mask(s), scaled, f.q_pos0);
  // Softmax with its statistics: lse = max + log(sum(exp(x - max))).
  const Uid row_max = g.virtual_tensor(z.rows(), z.rows_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  const Uid centred = scores_op(g, z, CUDNN_POINTWISE_SUB, masked, row_max);
  const Uid exps = scores_op(g, z, CUDNN_POINTWISE_EXP, centred);
  const Uid row_sum = g.virtual_tensor(z.rows(), z.rows_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, row_sum);
  const Uid log_sum = g.virtual_tensor(z.rows(), z.rows_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, f.lse, CUDNN_DATA_FLOAT, log_sum);
  // P in BF16: the second GEMM's A operand takes the I/O type.
  const Uid probs = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, exps, probs, CUDNN_DATA_FLOAT, row_sum);
  g.matmul(probs, f.v, f.out);
  return f;
}

AttentionBackwardGraph attention_backward_graph(const AttentionShape& s, bool deterministic) {
  const Sizes z(s);
  AttentionBackwardGraph b;
  Graph& g = b.graph;
  const Dims q_dims{z.B, z.Hq, z.Tq, z.D}, q_strides = bshd_strides(z.Tq, z.Hq, z.D);
  const Dims kv_dims{z.B, z.Hkv, z.Tk, z.D}, kv_strides = bshd_strides(z.Tk, z.Hkv, z.D);
  const Dims kvt_dims{z.B, z.Hkv, z.D, z.Tk}, kvt_strides = bshd_strides_transposed(z.Tk, z.Hkv, z.D);
  b.q = g.tensor(q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  b.k = g.tensor(kvt_dims, kvt_strides, CUDNN_DATA_BFLOAT16);  // K^T
  b.v = g.tensor(kvt_dims, kvt_strides, CUDNN_DATA_BFLOAT16);  // V^T
  b.out = g.tensor(q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  b.d_out = g.tensor(q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  b.lse = g.tensor(z.rows(), z.rows_strides(), CUDNN_DATA_FLOAT);
  b.d_q = g.tensor(q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  b.d_k = g.tensor(kv_dims, kv_strides, CUDNN_DATA_BFLOAT16);
  b.d_v = g.tensor(kv_dims, kv_strides, CUDNN_DATA_BFLOAT16);
  const Uid scale = g.scalar(softmax_scale(s));

  // row_dot_i = sum_d dO_id O_id (FlashAttention's D_i), kept in a buffer.
  const Uid products =
      g.virtual_tensor(q_dims, {z.Hq * z.Tq * z.D, z.Tq * z.D, z.Hq * z.D, 1}, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, b.d_out, products, CUDNN_DATA_FLOAT, b.out);
  const Uid dots = g.virtual_tensor(z.rows(), z.rows_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, products, dots);
  b.row_dot = g.tensor(z.rows(), z.rows_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dots, b.row_dot, CUDNN_DATA_FLOAT, g.scalar(1.0f));

  // P = exp(mask(scale * Q K^T) - lse).
  const Uid scores = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_FLOAT);
  g.matmul(b.q, b.k, scores);
  const Uid scaled = scores_op(g, z, CUDNN_POINTWISE_MUL, scores, scale);
  const Uid centred = scores_op(g, z, CUDNN_POINTWISE_SUB, scaled, b.lse);
  const Uid masked = causal_mask(g, z, attention_mask(s), centred, b.q_pos0);
  const Uid probs = scores_op(g, z, CUDNN_POINTWISE_EXP, masked);

  // Transposed [b, h, Tk, Tq] BF16 views of a scores-shaped tensor, for the kv-side GEMMs.
  const Dims t_dims{z.B, z.Hq, z.Tk, z.Tq}, t_strides{z.Hq * z.Tq * z.Tk, z.Tq * z.Tk, 1, z.Tk};
  auto transposed = [&](Uid x) {
    const Uid t = g.virtual_tensor(t_dims, t_strides, CUDNN_DATA_BFLOAT16);
    g.reshape(x, t);
    return t;
  };
  // kv gradient = a^T b, summed over each kv head's group of query heads (GQA) by a reduction.
  auto kv_grad = [&](Uid a_t, Uid rhs, Uid grad) {
    if (z.Hq == z.Hkv) return g.matmul(a_t, rhs, grad);
    const Uid per_query_head = g.virtual_tensor({z.B, z.Hq, z.Tk, z.D},
                                                {z.Hq * z.Tk * z.D, z.Tk * z.D, z.D, 1}, CUDNN_DATA_BFLOAT16);
    g.matmul(a_t, rhs, per_query_head);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_query_head, grad);
  };
  kv_grad(transposed(probs), b.d_out, b.d_v);

  // dS = P * (dO V^T - row_dot) * scale.
  const Uid d_probs = g.virtual_tensor(z.scores(), z.scores_strides(), CUDNN_DATA_FLOAT);
  g.matmul(b.d_out, b.v, d_probs);
  const Uid d_centred = scores_op(g, z, CUDNN_POINTWISE_SUB, d_probs, b.row_dot);
  const Uid d_masked = scores_op(g, z, CUDNN_POINTWISE_MUL, d_centred, probs);
  const Uid d_scores = scores_op(g, z, CUDNN_POINTWISE_MUL, d_masked, scale);
  kv_grad(transposed(d_scores), b.q, b.d_k);

  // dQ = dS K: K^T's view back to [b, h, Tk, D] (F32, the intermediate type, as the frontend's).
  const Uid k = g.virtual_tensor(kv_dims, kv_strides, CUDNN_DATA_FLOAT);
  g.reshape(b.k, k);
  if (deterministic) {
    g.matmul(d_scores, k, b.d_q);
  } else {
    b.d_q_accum = g.tensor(q_dims, {z.Hq * z.Tq * z.D, z.Tq * z.D, z.D, 1}, CUDNN_DATA_FLOAT);
    g.matmul(d_scores, k, b.d_q_accum);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, b.d_q_accum, b.d_q);
  }
  return b;
}

// ---- CudnnAttention

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // the plans before the handle they were built with
  if (handle_ != nullptr) static_cast<void>(cudnn::api().Destroy(handle_));
}

cudnnHandle_t CudnnAttention::handle(const LaunchContext& ctx) {
  if (handle_ == nullptr) {
    const std::size_t version = cudnn::api().GetVersion();
    if (version < kMinCudnnVersion) {
      throw std::runtime_error("cuDNN " + std::to_string(version) +
                               " is older than 9.16, the first whose fused " +
                               "attention these graphs trust (cuDNN's frontend patches 9.15's backward)");
    }
    cudnn::check(cudnn::api().Create(&handle_), "creating a handle");
  }
  if (stream_ != ctx.stream) {
    cudnn::check(cudnn::api().SetStream(handle_, ctx.stream), "binding the compute stream");
    stream_ = ctx.stream;
  }
  return handle_;
}

CudnnAttention::Plans& CudnnAttention::plans(const AttentionShape& s) {
  return plans_[Key{s.B, s.Tq, s.Tk, static_cast<int>(attention_mask(s)), s.Hq, s.Hkv, s.D}];
}

void CudnnAttention::execute(const cudnn::Plan& plan, const AttentionShape& s, const Bindings& data,
                             void* workspace, cudnn::Graph::Uid q_pos0) {
  std::vector<std::pair<std::int64_t, std::int32_t>> values;
  if (q_pos0 != 0) values.emplace_back(q_pos0, s.q_pos0);
  plan.execute(handle_, data, workspace, values);
}

bool CudnnAttention::run(const LaunchContext& ctx, std::optional<cudnn::Plan>& plan, bool& failed,
                         const char* which, const AttentionShape& s, const Bindings& data, void* workspace,
                         cudnn::Graph::Uid q_pos0) {
  try {
    handle(ctx);  // bound to this call's stream (the plan may have been built on another's)
    execute(*plan, s, data, workspace, q_pos0);
    return true;
  } catch (const std::runtime_error& e) {  // cuDNN refused to launch: nothing ran, our kernels take the shape
    failed = true;
    plan.reset();
    report_failure(which, s, e.what());
    return false;
  }
}

bool CudnnAttention::trusted(std::optional<cudnn::Plan>& plan, bool& checked, bool& failed, const char* which,
                             const AttentionShape& s, const std::function<std::string()>& check,
                             const std::function<double()>& cudnn_seconds,
                             const std::function<double()>& own_seconds) {
  if (checked) return true;
  std::string why;
  const std::string disagreement = check();
  if (!disagreement.empty()) {
    why = "its numbers differ from ptrain's kernels: " + disagreement;
  } else if (cudnn_attention_mode() == CudnnAttentionMode::Auto) {
    try {
      const double theirs = cudnn_seconds(), ours = own_seconds();
      if (ours < theirs) {
        char text[160];
        std::snprintf(text, sizeof text, "ptrain's kernels run it faster (%.3f ms against cuDNN's %.3f ms)",
                      ours * 1e3, theirs * 1e3);
        why = text;
      }
    } catch (const std::runtime_error& e) {  // cuDNN refused the timed runs
      why = e.what();
    }
  }
  checked = true;
  if (why.empty()) return true;
  failed = true;
  plan.reset();
  report_failure(which, s, why);
  return false;
}

void CudnnAttention::report_first_plan(const cudnn::Plan& plan) {
  if (reported_plan_) return;
  reported_plan_ = true;
  std::fprintf(stderr,
               "ptrain: BF16 attention on cuDNN %zu's fused kernels (%s; PTRAIN_CUDNN_ATTENTION=%s)\n",
               cudnn::api().GetVersion(), plan.engine().c_str(), to_string(cudnn_attention_mode()));
}

void CudnnAttention::report_failure(const char* which, const AttentionShape& s, const std::string& why) {
  std::fprintf(stderr,
               "ptrain: the attention %s of B=%d Tq=%d Tk=%d q_pos0=%d Hq=%d Hkv=%d D=%d goes to ptrain's "
               "own kernels, not cuDNN's: %s\n",
               which, s.B, s.Tq, s.Tk, s.q_pos0, s.Hq, s.Hkv, s.D, why.c_str());
}

bool CudnnAttention::forward(const LaunchContext& ctx, Buf out, Buf lse, Buf q, Buf k, Buf v,
                             const AttentionShape& s) {
  if (!eligible({q, k, v, out, lse}, s)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Plans& p = plans(s);
  if (p.fwd_failed) return false;
  if (!p.fwd) {
    try {
      p.fwd_graph = attention_forward_graph(s);
      p.fwd = p.fwd_graph->graph.build(cudnn::Target::handle(handle(ctx)));
      report_first_plan(*p.fwd);
    } catch (const std::runtime_error& e) {
      p.fwd_failed = true;
      report_failure("forward", s, e.what());
      return false;
    }
  }
  const AttentionForwardGraph& f = *p.fwd_graph;
  // lse is optional in the contract; the graph always writes it.
  Scratch<float> lse_scratch(ctx, lse.ptr == nullptr ? static_cast<std::size_t>(s.lse_elements()) : 0);
  Scratch<std::byte> workspace(ctx, static_cast<std::size_t>(p.fwd->workspace_bytes()));
  const Bindings data{{f.q, q.ptr},
                      {f.k, k.ptr},
                      {f.v, v.ptr},
                      {f.out, out.ptr},
                      {f.lse, lse.ptr != nullptr ? lse.ptr : lse_scratch.get()}};
  if (!run(ctx, p.fwd, p.fwd_failed, "forward", s, data, workspace.get(), f.q_pos0)) return false;
  return trusted(
      p.fwd, p.fwd_checked, p.fwd_failed, "forward", s,
      [&] { return check_attention_forward_against_own(ctx, out, lse, q, k, v, s); },
      [&] { return time_on_stream(ctx, [&] { execute(*p.fwd, s, data, workspace.get(), f.q_pos0); }); },
      [&] { return own_attention_forward_seconds(ctx, q, k, v, s); });
}

bool CudnnAttention::backward(const LaunchContext& ctx, Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k,
                              Buf v, Buf out, Buf lse, const AttentionShape& s) {
  if (!eligible({q, k, v, out, d_out, d_q, d_k, d_v, lse}, s)) return false;
  const bool deterministic = cudnn_attention_mode() == CudnnAttentionMode::Deterministic;
  std::lock_guard<std::mutex> lock(mutex_);
  Plans& p = plans(s);
  if (p.bwd_failed) return false;
  if (p.bwd && (p.bwd_graph->d_q_accum == 0) != deterministic) {  // PTRAIN_CUDNN_ATTENTION changed
    p.bwd.reset();
    p.bwd_checked = false;
  }
  if (!p.bwd) {
    try {
      p.bwd_graph = attention_backward_graph(s, deterministic);
      p.bwd = p.bwd_graph->graph.build(cudnn::Target::handle(handle(ctx)));
      report_first_plan(*p.bwd);
    } catch (const std::runtime_error& e) {
      p.bwd_failed = true;
      report_failure("backward", s, e.what());
      return false;
    }
  }
  const AttentionBackwardGraph& b = *p.bwd_graph;
  const std::int64_t rows = std::int64_t{s.B} * s.Hq * s.Tq;
  Scratch<float> row_dot(ctx, static_cast<std::size_t>(rows));
  Scratch<float> d_q_accum(ctx, deterministic ? 0 : static_cast<std::size_t>(rows * s.D));
  Scratch<std::byte> workspace(ctx, static_cast<std::size_t>(p.bwd->workspace_bytes()));
  Bindings data{{b.q, q.ptr},     {b.k, k.ptr},     {b.v, v.ptr},     {b.out, out.ptr}, {b.d_out, d_out.ptr},
                {b.lse, lse.ptr}, {b.d_q, d_q.ptr}, {b.d_k, d_k.ptr}, {b.d_v, d_v.ptr}, {b.row_dot, row_dot.get()}};
  // cuDNN zeroes the accumulator itself (from 9.6 on).
  if (!deterministic) data.emplace_back(b.d_q_accum, d_q_accum.get());

  if (!run(ctx, p.bwd, p.bwd_failed, "backward", s, data, workspace.get(), b.q_pos0)) return false;
  return trusted(
      p.bwd, p.bwd_checked, p.bwd_failed, "backward", s,
      [&] { return check_attention_backward_against_own(ctx, d_q, d_k, d_v, d_out, q, k, v, out, lse, s); },
      [&] { return time_on_stream(ctx, [&] { execute(*p.bwd, s, data, workspace.get(), b.q_pos0); }); },
      [&] { return own_attention_backward_seconds(ctx, d_out, q, k, v, out, lse, s); });
}

}  // namespace ptrain::kernels::cuda
