// The ops' argument checks (see op_checks.h), shared by the CPU and CUDA entries.
#include "kernels/op_checks.h"

#include <initializer_list>
#include <stdexcept>
#include <utility>

#include "kernels/ops.h"

namespace ptrain::kernels {

[[noreturn]] void fail(const char* backend, const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(backend) + " " + op + ": " + what);
}

namespace {

// The checks of one call, every failure naming the backend and the op.
struct Checker {
  const char* backend;
  const char* op;

  [[noreturn]] void fail(const std::string& what) const { kernels::fail(backend, op, what); }
  void require(bool ok, const char* what) const { kernels::require(ok, backend, op, what); }

  void require_sizes(std::initializer_list<std::int64_t> sizes) const {
    for (std::int64_t s : sizes) {
      if (s < 0) fail("negative size " + std::to_string(s));
    }
  }

  // `b` must be non-null unless it is to hold no element (`count` == 0: an empty tensor).
  void require_nonnull(const char* name, Buf b, std::int64_t count) const {
    if (!b && count > 0) fail(std::string("'") + name + "' is null");
  }

  // `b` must be non-null (unless empty) and of dtype `want`.
  void require_buf(const char* name, Buf b, DType want, std::int64_t count = 1) const {
    require_nonnull(name, b, count);
    if (b.dtype != want) {
      fail(std::string("'") + name + "' must be " + to_string(want) + ", got " + to_string(b.dtype));
    }
  }

  // `b` must be non-null (unless empty) and hold floating-point values: F32 or BF16.
  void require_float(const char* name, Buf b, std::int64_t count = 1) const {
    require_nonnull(name, b, count);
    if (b.dtype != DType::F32 && b.dtype != DType::BF16) {
      fail(std::string("'") + name + "' must be f32 or bf16, got " + to_string(b.dtype));
    }
  }

  // Optional arguments (may be null): checked only when given.
  void require_opt(const char* name, Buf b, DType want) const {
    if (b) require_buf(name, b, want);
  }
  void require_opt_float(const char* name, Buf b) const {
    if (b) require_float(name, b);
  }

  // `b` (if given) must have the dtype of `ref`, the argument that fixes the op's element type.
  void require_same(const char* name, Buf b, const char* ref_name, Buf ref) const {
    if (b && b.dtype != ref.dtype) {
      fail(std::string("'") + name + "' must have the dtype of '" + ref_name + "' (" + to_string(ref.dtype) +
           "), got " + to_string(b.dtype));
    }
  }

  // The rule of the ops whose buffers share one element type: every named buffer non-null (unless
  // n == 0), F32 or BF16, and all of the first one's dtype. Also checks n >= 0.
  void require_same_floats(std::int64_t n, std::initializer_list<std::pair<const char*, Buf>> bufs) const {
    require_sizes({n});
    const auto& first = *bufs.begin();
    for (const auto& [name, b] : bufs) {
      require_float(name, b, n);
      require_same(name, b, first.first, first.second);
    }
  }

  // A GEMM output: F32, or either F32 or BF16 when the inputs (`compute`) are BF16.
  void require_gemm_output(const char* name, Buf out, const char* compute_name, Buf compute) const {
    require_float(name, out);
    if (compute.dtype == DType::F32 && out.dtype != DType::F32) {
      fail(std::string("'") + name + "' must be f32 when '" + compute_name + "' is f32, got " +
           to_string(out.dtype));
    }
  }

  // The linear layer's rules, with its output (d_in) named as the calling op names it.
  void require_linear_forward(const char* out_name, Buf out, Buf in, Buf weight, Buf bias, int M, int N,
                              int K) const {
    require_sizes({M, N, K});
    require_float("in", in);
    require_float("weight", weight);
    require_same("weight", weight, "in", in);
    require_gemm_output(out_name, out, "in", in);
    require_opt_float("bias", bias);
    require_same("bias", bias, out_name, out);
  }
  void require_linear_backward(const char* d_in_name, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                               Buf weight, int M, int N, int K) const {
    require_sizes({M, N, K});
    require_float("d_out", d_out);
    if (d_in) {
      require_float("weight", weight);
      require_same("weight", weight, "d_out", d_out);
      require_gemm_output(d_in_name, d_in, "d_out", d_out);
    }
    if (d_weight) {
      require_float("in", in);
      require_same("in", in, "d_out", d_out);
      require_gemm_output("d_weight", d_weight, "d_out", d_out);
    }
    require_opt_float("d_bias", d_bias);
  }

  // Returns the element counts of the [B, T, Hq, D] and [B, T, Hkv, D] tensors.
  std::pair<std::int64_t, std::int64_t> require_attention_shape(const AttentionShape& s) const {
    require_sizes({s.B, s.Tq, s.Tk, s.q_pos0, s.Hq, s.Hkv, s.D});
    require(s.Hkv > 0 && s.D > 0, "Hkv and D must be positive");
    require(s.Hq % s.Hkv == 0, "Hq must be a multiple of Hkv");
    require(s.Tk > 0 || s.Tq == 0, "queries need keys: Tk must be positive when Tq is");
    return {s.q_elements(), s.kv_elements()};
  }

  // The norms' rules, written for layernorm: RMSNorm passes no mean and no bias (d_bias), which are
  // optional here. Backward's saved stats (mean, rstd) are checked by the caller. The forward's input
  // is `in_name` (x_out in the fused residual add + norm ops).
  void require_norm_forward(Buf out, Buf mean, Buf rstd, const char* in_name, Buf in, Buf weight, Buf bias,
                            int N, int C) const {
    require_sizes({N, C});
    require(C > 0 || N == 0, "C must be positive");
    require_float("out", out);
    require_opt("mean", mean, DType::F32);
    require_opt("rstd", rstd, DType::F32);
    require_float(in_name, in);
    require_same(in_name, in, "out", out);
    require_float("weight", weight);
    require_opt_float("bias", bias);
    require_same("bias", bias, "weight", weight);
  }
  // The residual add before a fused norm (x_out, the norm's input, is checked as such).
  void require_residual_add(Buf x_out, Buf a, Buf b) const {
    require_float("a", a);
    require_same("a", a, "x_out", x_out);
    require_float("b", b);
    require_same("b", b, "x_out", x_out);
  }
  void require_norm_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int N,
                             int C) const {
    require_sizes({N, C});
    require_opt_float("d_in", d_in);
    require_opt_float("d_weight", d_weight);
    require_opt_float("d_bias", d_bias);
    if (d_weight && d_bias) require_same("d_bias", d_bias, "d_weight", d_weight);
    require_float("d_out", d_out);
    require_float("in", in);
    require_same("d_out", d_out, "in", in);
    require_same("d_in", d_in, "in", in);
    require_float("weight", weight);
  }

  void require_rope(const char* name, Buf x, int B, int T, int H, int D, float theta) const {
    require_sizes({B, T, H, D});
    require(D % 2 == 0, "D must be even");
    require(theta > 0.0f, "theta must be positive");
    require_float(name, x);
  }
};

}  // namespace

void check_linear_forward(const char* backend, Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) {
  Checker{backend, "linear_forward"}.require_linear_forward("out", out, in, weight, bias, M, N, K);
}

void check_linear_backward(const char* backend, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                           Buf weight, int M, int N, int K) {
  Checker{backend, "linear_backward"}.require_linear_backward("d_in", d_in, d_weight, d_bias, d_out, in,
                                                              weight, M, N, K);
}

void check_linear_input_grad_add(const char* backend, Buf d_in, Buf d_out, Buf weight, int M, int N, int K) {
  const Checker c{backend, "linear_input_grad_add"};
  c.require_float("d_in", d_in);
  c.require_linear_backward("d_in", d_in, Buf{}, Buf{}, d_out, Buf{}, weight, M, N, K);
}

void check_linear_gelu_forward(const char* backend, Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M,
                               int N, int K) {
  const Checker c{backend, "linear_gelu_forward"};
  c.require_linear_forward("pre", pre, in, weight, bias, M, N, K);
  c.require_same_floats(std::int64_t{M} * N, {{"pre", pre}, {"out", out}});  // gelu_forward(out, pre)
}

void check_linear_backward_gelu(const char* backend, Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                                Buf weight, Buf pre, int M, int N, int K) {
  const Checker c{backend, "linear_backward_gelu"};
  c.require_linear_backward("d_pre", d_pre, d_weight, d_bias, d_out, in, weight, M, N, K);
  c.require_same_floats(std::int64_t{M} * K, {{"d_pre", d_pre}, {"pre", pre}});  // gelu_backward in place
}

void check_embedding_forward(const char* backend, Buf out, Buf tokens, Buf table, Buf positions, int N, int T,
                             int C) {
  const Checker c{backend, "embedding_forward"};
  c.require_sizes({N, T, C});
  c.require_float("out", out);
  c.require_buf("tokens", tokens, DType::I32);
  c.require_float("table", table);
  c.require_same("table", table, "out", out);
  c.require_opt_float("positions", positions);
  c.require_same("positions", positions, "out", out);
  c.require(!positions || T > 0, "positions given but T == 0");
}

void check_embedding_backward(const char* backend, Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N,
                              int T, int C) {
  const Checker c{backend, "embedding_backward"};
  c.require_sizes({N, T, C});
  c.require_opt_float("d_table", d_table);
  c.require_opt_float("d_positions", d_positions);
  if (d_table && d_positions) c.require_same("d_positions", d_positions, "d_table", d_table);
  c.require_float("d_out", d_out);
  c.require_buf("tokens", tokens, DType::I32);
  c.require(!d_positions || T > 0, "d_positions given but T == 0");
}

void check_layernorm_forward(const char* backend, Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias,
                             int N, int C) {
  Checker{backend, "layernorm_forward"}.require_norm_forward(out, mean, rstd, "in", in, weight, bias, N, C);
}

void check_layernorm_backward(const char* backend, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                              Buf weight, Buf mean, Buf rstd, int N, int C) {
  const Checker c{backend, "layernorm_backward"};
  c.require_norm_backward(d_in, d_weight, d_bias, d_out, in, weight, N, C);
  c.require_buf("mean", mean, DType::F32);
  c.require_buf("rstd", rstd, DType::F32);
}

void check_rmsnorm_forward(const char* backend, Buf out, Buf rstd, Buf in, Buf weight, int N, int C) {
  Checker{backend, "rmsnorm_forward"}.require_norm_forward(out, Buf{}, rstd, "in", in, weight, Buf{}, N, C);
}

void check_rmsnorm_backward(const char* backend, Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight,
                            Buf rstd, int N, int C) {
  const Checker c{backend, "rmsnorm_backward"};
  c.require_norm_backward(d_in, d_weight, Buf{}, d_out, in, weight, N, C);
  c.require_buf("rstd", rstd, DType::F32);
}

void check_add_layernorm_forward(const char* backend, Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b,
                                 Buf weight, Buf bias, int N, int C) {
  const Checker c{backend, "add_layernorm_forward"};
  c.require_norm_forward(out, mean, rstd, "x_out", x_out, weight, bias, N, C);
  c.require_residual_add(x_out, a, b);
}

void check_add_rmsnorm_forward(const char* backend, Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight,
                               int N, int C) {
  const Checker c{backend, "add_rmsnorm_forward"};
  c.require_norm_forward(out, Buf{}, rstd, "x_out", x_out, weight, Buf{}, N, C);
  c.require_residual_add(x_out, a, b);
}

void check_rope_forward(const char* backend, Buf x, int B, int T, int H, int D, float theta) {
  Checker{backend, "rope_forward"}.require_rope("x", x, B, T, H, D, theta);
}

void check_rope_backward(const char* backend, Buf d_x, int B, int T, int H, int D, float theta) {
  Checker{backend, "rope_backward"}.require_rope("d_x", d_x, B, T, H, D, theta);
}

void check_attention_forward(const char* backend, Buf out, Buf lse, Buf q, Buf k, Buf v,
                             const AttentionShape& s) {
  const Checker c{backend, "attention_forward"};
  const auto [nq, nkv] = c.require_attention_shape(s);
  c.require_float("q", q, nq);
  c.require_buf("k", k, q.dtype, nkv);
  c.require_buf("v", v, q.dtype, nkv);
  c.require_buf("out", out, q.dtype, nq);
  c.require_opt("lse", lse, DType::F32);
}

void check_attention_backward(const char* backend, Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v,
                              Buf out, Buf lse, const AttentionShape& s) {
  const Checker c{backend, "attention_backward"};
  const auto [nq, nkv] = c.require_attention_shape(s);
  c.require_float("q", q, nq);
  c.require_buf("d_q", d_q, q.dtype, nq);
  c.require_buf("d_k", d_k, q.dtype, nkv);
  c.require_buf("d_v", d_v, q.dtype, nkv);
  c.require_buf("d_out", d_out, q.dtype, nq);
  c.require_buf("k", k, q.dtype, nkv);
  c.require_buf("v", v, q.dtype, nkv);
  c.require_buf("out", out, q.dtype, nq);
  c.require_buf("lse", lse, DType::F32, s.lse_elements());
}

void check_attention_merge(const char* backend, Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H,
                           int D) {
  const Checker c{backend, "attention_merge"};
  c.require_sizes({B, T, H, D});
  const std::int64_t n = std::int64_t{B} * T * H * D, rows = std::int64_t{B} * H * T;
  c.require_float("out", out, n);
  c.require_buf("part", part, out.dtype, n);
  c.require_buf("lse", lse, DType::F32, rows);
  c.require_buf("part_lse", part_lse, DType::F32, rows);
}

void check_gelu_forward(const char* backend, Buf out, Buf in, std::int64_t n) {
  Checker{backend, "gelu_forward"}.require_same_floats(n, {{"out", out}, {"in", in}});
}

void check_gelu_backward(const char* backend, Buf d_in, Buf d_out, Buf in, std::int64_t n) {
  Checker{backend, "gelu_backward"}.require_same_floats(n, {{"d_in", d_in}, {"d_out", d_out}, {"in", in}});
}

void check_swiglu_forward(const char* backend, Buf out, Buf gate, Buf up, std::int64_t n) {
  Checker{backend, "swiglu_forward"}.require_same_floats(n, {{"out", out}, {"gate", gate}, {"up", up}});
}

void check_swiglu_backward(const char* backend, Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up,
                           std::int64_t n) {
  Checker{backend, "swiglu_backward"}.require_same_floats(
      n, {{"d_gate", d_gate}, {"d_up", d_up}, {"d_out", d_out}, {"gate", gate}, {"up", up}});
}

void check_add(const char* backend, Buf out, Buf a, Buf b, std::int64_t n) {
  Checker{backend, "add"}.require_same_floats(n, {{"out", out}, {"a", a}, {"b", b}});
}

void check_accumulate(const char* backend, Buf acc, Buf x, std::int64_t n) {
  const Checker c{backend, "accumulate"};
  c.require_sizes({n});
  c.require_float("acc", acc, n);
  c.require_float("x", x, n);
}

void check_scale(const char* backend, Buf x, std::int64_t n) {
  Checker{backend, "scale"}.require_same_floats(n, {{"x", x}});
}

void check_fill(const char* backend, Buf x, std::int64_t n) {
  Checker{backend, "fill"}.require_same_floats(n, {{"x", x}});
}

void check_fill_normal(const char* backend, Buf x, std::int64_t rows, std::int64_t cols) {
  const Checker c{backend, "fill_normal"};
  c.require_sizes({rows, cols});
  c.require_buf("x", x, DType::F32, rows * cols);
}

void check_convert(const char* backend, Buf dst, Buf src, std::int64_t n) {
  const Checker c{backend, "convert"};
  c.require_sizes({n});
  c.require_float("dst", dst, n);
  c.require_float("src", src, n);
}

void check_cross_entropy_forward_backward(const char* backend, Buf losses, Buf d_logits, Buf logits,
                                          Buf targets, int N, int V, int Vp) {
  const Checker c{backend, "cross_entropy_forward_backward"};
  c.require_sizes({N, V, Vp});
  c.require(V > 0 || N == 0, "V must be positive");
  c.require(V <= Vp, "V must not exceed Vp");
  c.require_buf("losses", losses, DType::F32, N);
  c.require_opt_float("d_logits", d_logits);
  c.require_float("logits", logits, N);
  c.require_same("d_logits", d_logits, "logits", logits);
  c.require_buf("targets", targets, DType::I32, N);
}

void check_cross_entropy_shard_stats(const char* backend, Buf stats, Buf logits, Buf targets, int N, int V,
                                     int Vs, int shard) {
  const Checker c{backend, "cross_entropy_shard_stats"};
  c.require_sizes({N, V, Vs, shard});
  c.require(V > 0 || N == 0, "V must be positive");
  const std::int64_t rows = N;
  c.require_buf("stats", stats, DType::F32, rows * kCrossEntropyShardStats);
  c.require_float("logits", logits, rows * Vs);
  c.require_buf("targets", targets, DType::I32, rows);
}

void check_cross_entropy_shard_forward_backward(const char* backend, Buf losses, Buf d_logits, Buf logits,
                                                Buf all_stats, Buf targets, int N, int V, int Vs, int shard,
                                                int shards) {
  const Checker c{backend, "cross_entropy_shard_forward_backward"};
  c.require_sizes({N, V, Vs, shard});
  c.require(V > 0 || N == 0, "V must be positive");
  c.require(shard < shards, "shard must be below shards");
  c.require(static_cast<std::int64_t>(Vs) * shards >= V, "the shards must cover V");
  const std::int64_t rows = N;
  c.require_buf("losses", losses, DType::F32, rows);
  c.require_opt_float("d_logits", d_logits);
  c.require_float("logits", logits, rows * Vs);
  c.require_same("d_logits", d_logits, "logits", logits);
  c.require_buf("all_stats", all_stats, DType::F32, rows * shards * kCrossEntropyShardStats);
  c.require_buf("targets", targets, DType::I32, rows);
}

void check_moe_route(const char* backend, Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits,
                     int B, int T, int E, int k, int capacity, int first_expert, int experts_here) {
  const Checker c{backend, "moe_route"};
  c.require_sizes({B, T, E, k, capacity, first_expert});
  c.require(k >= 1 && k <= E, "k must be in [1, E]");
  c.require(experts_here >= 1 && first_expert + experts_here <= E,
            "the experts here must be a non-empty range of the E experts");
  const std::int64_t N = static_cast<std::int64_t>(B) * T;
  c.require_buf("logits", logits, DType::F32, N * E);
  c.require_buf("probs", probs, DType::F32, N * E);
  c.require_buf("choice", choice, DType::I32, N * k);
  c.require_buf("weight", weight, DType::F32, N * k);
  c.require_buf("slot", slot, DType::I32, N * k);
  c.require_buf("counts", counts, DType::F32, static_cast<std::int64_t>(B) * E);
}

void check_moe_route_backward(const char* backend, Buf d_logits, Buf d_weight, Buf probs, Buf choice,
                              Buf weight, Buf counts, int B, int T, int E, int k) {
  const Checker c{backend, "moe_route_backward"};
  c.require_sizes({B, T, E, k});
  c.require(k >= 1 && k <= E, "k must be in [1, E]");
  const std::int64_t N = static_cast<std::int64_t>(B) * T;
  c.require_float("d_logits", d_logits, N * E);
  c.require_buf("d_weight", d_weight, DType::F32, N * k);
  c.require_buf("probs", probs, DType::F32, N * E);
  c.require_buf("choice", choice, DType::I32, N * k);
  c.require_buf("weight", weight, DType::F32, N * k);
  c.require_buf("counts", counts, DType::F32, static_cast<std::int64_t>(B) * E);
}

void check_moe_scatter(const char* backend, Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight,
                       int N, int k, int R, int C) {
  const Checker c{backend, "moe_scatter"};
  c.require_sizes({N, k, R, C});
  c.require_float("rows", rows, static_cast<std::int64_t>(R) * C);
  c.require_float("x", x, static_cast<std::int64_t>(N) * C);
  c.require_same("x", x, "rows", rows);
  c.require_buf("slot", slot, DType::I32, static_cast<std::int64_t>(N) * k);
  c.require_opt("weight", weight, DType::F32);
  c.require_opt("d_weight", d_weight, DType::F32);
  if (d_weight) {
    c.require_float("src", src, static_cast<std::int64_t>(R) * C);
    c.require_same("src", src, "rows", rows);
  }
}

void check_moe_combine(const char* backend, Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C) {
  const Checker c{backend, "moe_combine"};
  c.require_sizes({N, k, C});
  c.require_float("out", out, static_cast<std::int64_t>(N) * C);
  c.require_nonnull("rows", rows, static_cast<std::int64_t>(N) * C);
  c.require_same("rows", rows, "out", out);
  c.require_buf("slot", slot, DType::I32, static_cast<std::int64_t>(N) * k);
  c.require_opt("weight", weight, DType::F32);
}

void check_adamw_step(const char* backend, Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n,
                      int step) {
  const Checker c{backend, "adamw_step"};
  c.require_sizes({n});
  c.require(step >= 1, "step must be >= 1");
  c.require_buf("param", param, DType::F32, n);
  c.require_buf("grad", grad, DType::F32, n);
  c.require_buf("m", m, DType::F32, n);
  c.require_buf("v", v, DType::F32, n);
  c.require_opt_float("param_out", param_out);
}

void check_reduction(const char* backend, const char* op, Buf out, Buf x, std::int64_t n) {
  const Checker c{backend, op};
  c.require_sizes({n});
  c.require_buf("out", out, DType::F32);
  c.require_float("x", x, n);
}

void check_output_amax(const char* backend, const char* op, Buf amax) {
  Checker{backend, op}.require_opt("amax", amax, DType::F32);
}

void check_abs_max(const char* backend, Buf amax, Buf x, std::int64_t n) {
  check_reduction(backend, "abs_max", amax, x, n);
}

void check_fp8_round(const char* backend, Buf out, Buf x, Buf amax, std::int64_t n) {
  const Checker c{backend, "fp8_round"};
  c.require_sizes({n});
  c.require_buf("amax", amax, DType::F32);
  c.require_float("x", x, n);
  c.require_buf("out", out, x.dtype, n);
}

namespace {

// An FP8 operand: non-null unless it holds nothing, of dtype E4M3 or E5M2.
void require_fp8(const Checker& c, const char* name, Buf b, std::int64_t count) {
  c.require_nonnull(name, b, count);
  if (!is_fp8(b.dtype)) c.fail(std::string("'") + name + "' must be e4m3 or e5m2, got " + to_string(b.dtype));
}

// The GEMM's operands, its output named `out_name`.
void check_fp8_operands(const Checker& c, const char* out_name, Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias,
                        int M, int N, int K) {
  c.require_sizes({M, N, K});
  require_fp8(c, "a", a, std::int64_t{M} * K);
  require_fp8(c, "b", b, std::int64_t{N} * K);
  c.require(!(a.dtype == DType::E5M2 && b.dtype == DType::E5M2), "'a' and 'b' may not both be e5m2");
  c.require_buf("a_inv_scale", a_inv_scale, DType::F32);
  c.require_buf("b_inv_scale", b_inv_scale, DType::F32);
  c.require_float(out_name, out, std::int64_t{M} * N);
  c.require_same("bias", bias, out_name, out);
}

}  // namespace

void check_fp8_cast(const char* backend, Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax,
                    std::int64_t rows, std::int64_t cols) {
  const Checker c{backend, "fp8_cast"};
  c.require_sizes({rows, cols});
  c.require(out || out_t, "'out' and 'out_t' are both null");
  const std::int64_t n = rows * cols;
  if (out) require_fp8(c, "out", out, n);
  if (out_t) require_fp8(c, "out_t", out_t, n);
  c.require_same("out_t", out_t, "out", out ? out : out_t);
  c.require_float("x", x, n);
  c.require_buf("amax", amax, DType::F32);
  c.require_buf("inv_scale", inv_scale, DType::F32);
  c.require_opt("record", record, DType::F32);
  c.require(!record || record.ptr != amax.ptr, "'record' may not alias 'amax'");
}

void check_fp8_gemm(const char* backend, Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias,
                    int M, int N, int K, bool accumulate) {
  const Checker c{backend, "fp8_gemm"};
  check_fp8_operands(c, "out", out, a, b, a_inv_scale, b_inv_scale, bias, M, N, K);
  c.require(!(accumulate && bias), "a bias is added only without 'accumulate'");
}

void check_fp8_gemm_gelu(const char* backend, Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale,
                         Buf bias, int M, int N, int K) {
  const Checker c{backend, "fp8_gemm_gelu"};
  check_fp8_operands(c, "pre", pre, a, b, a_inv_scale, b_inv_scale, bias, M, N, K);
  c.require_float("out", out, std::int64_t{M} * N);
  c.require_same("out", out, "pre", pre);
}

}  // namespace ptrain::kernels
