#include <algorithm>

#include "engine/config/arith.h"
#include "engine/config/rules.h"
#include "engine/config/text.h"
#include "engine/config/value_reader.h"
#include "kernels/attention_shape.h"

namespace ptrain::config {
namespace {

// The head dims the CUDA attention kernels take (kernels/attention_shape.h): an error for
// backend: cuda, a warning for auto (which picks CUDA where there is a GPU).
void check_cuda_head_dim(LoadContext& ctx) {
  using kernels::kCudaHeadDimStep, kernels::kCudaMaxHeadDim;
  const ModelSpec& m = ctx.spec().model;
  const Backend backend = ctx.spec().backend;
  if (backend == Backend::Cpu || ctx.any_bad({"model.hidden", "model.heads", "backend"})) return;
  if (m.heads <= 0 || m.hidden % m.heads != 0) return;
  const auto supported = [](std::int64_t d) { return d % kCudaHeadDimStep == 0 && d <= kCudaMaxHeadDim; };
  const int d = m.hidden / m.heads;
  if (supported(d)) return;
  std::vector<std::int64_t> fitting;
  for (const std::int64_t h : divisors(m.hidden))
    if (supported(m.hidden / h)) fitting.push_back(h);
  const std::string problem = cat("head dim hidden/heads = ", d, ": the CUDA backend's attention takes multiples of ",
                                  kCudaHeadDimStep, " up to ", kCudaMaxHeadDim);
  const std::string fix = fitting.empty() ? cat("use a hidden size that is a multiple of ", kCudaHeadDimStep)
                                          : cat("use heads in ", list_numbers(fitting));
  if (backend == Backend::Cuda) return ctx.error("model.heads", problem, fix);
  ctx.warning("model.heads", problem + " (backend auto picks CUDA where there is a GPU)",
              fix + ", or set backend: cpu");
}

void check_heads(LoadContext& ctx) {
  ModelSpec& m = ctx.spec().model;
  const int tp = ctx.spec().parallel.tp;
  if (!ctx.any_bad({"model.hidden", "model.heads"}) && m.hidden % m.heads != 0) {
    ctx.error("model.hidden",
              cat("model.hidden = ", m.hidden, " is not divisible by model.heads = ", m.heads,
                  " (each head gets hidden/heads channels)"),
              cat("use hidden ", nearby_multiples(m.hidden, m.heads), ", or heads dividing ", m.hidden, ": ",
                  list_numbers(divisors(m.hidden))));
  }
  // RoPE rotates pairs of a head's channels (llama, mixtral).
  if (!ctx.any_bad({"model.hidden", "model.heads", "model.arch"}) && m.arch != Arch::Gpt2 &&
      m.hidden % m.heads == 0 && (m.hidden / m.heads) % 2 != 0) {
    std::vector<std::int64_t> even;
    for (const std::int64_t h : divisors(m.hidden))
      if ((m.hidden / h) % 2 == 0) even.push_back(h);
    ctx.error("model.heads",
              cat("head dim hidden/heads = ", m.hidden / m.heads, " is odd: RoPE rotates pairs of a head's channels"),
              even.empty() ? std::string("use an even model.hidden") : cat("use heads in ", list_numbers(even)));
  }
  check_cuda_head_dim(ctx);
  if (!ctx.any_bad({"model.heads", "parallel.tp"}) && m.heads % tp != 0) {
    ctx.error("model.heads",
              cat("model.heads = ", m.heads, " is not divisible by parallel.tp = ", tp,
                  " (each tp rank holds whole attention heads)"),
              cat("use parallel.tp dividing ", m.heads, ": ", list_numbers(divisors(m.heads))));
  }
}

void resolve_kv_heads(LoadContext& ctx) {
  ModelSpec& m = ctx.spec().model;
  const int tp = ctx.spec().parallel.tp;
  if (ctx.any_bad({"model.kv_heads", "model.heads"})) return;
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.arch == Arch::Gpt2 && m.kv_heads != m.heads) {
    ctx.error("model.kv_heads",
              cat("model.kv_heads = ", m.kv_heads,
                  " with arch gpt2, whose attention has a k and a v head per "
                  "query head (model.heads = ",
                  m.heads, ")"),
              "leave kv_heads out for gpt2 (grouped-query attention needs arch llama)");
    ctx.mark_bad("model.kv_heads");
    return;
  }
  if (m.heads % m.kv_heads != 0) {
    ctx.error("model.kv_heads",
              cat("model.heads = ", m.heads, " is not a multiple of model.kv_heads = ", m.kv_heads,
                  " (each kv head serves a whole group of query heads)"),
              cat("use kv_heads dividing ", m.heads, ": ", list_numbers(divisors(m.heads))));
    ctx.mark_bad("model.kv_heads");
    return;
  }
  // With heads % tp != 0 already reported, a defaulted kv_heads would only repeat it.
  if (ctx.any_bad({"parallel.tp"}) || m.kv_heads % tp == 0 || m.heads % tp != 0) return;
  if (tp % m.kv_heads == 0) {
    ctx.warning("model.kv_heads",
                cat("model.kv_heads = ", m.kv_heads, " < parallel.tp = ", tp,
                    ": each kv head is replicated on ", tp / m.kv_heads, " tp ranks"),
                "nothing to do for correctness; kv_heads divisible by tp avoids the replicas");
    return;
  }
  ctx.error("model.kv_heads",
            cat("model.kv_heads = ", m.kv_heads, " and parallel.tp = ", tp,
                ": kv heads can be neither split evenly (kv_heads % tp != 0) nor replicated evenly "
                "(tp % kv_heads != 0)"),
            cat("use parallel.tp dividing ", m.kv_heads, " (", list_numbers(divisors(m.kv_heads)),
                ") or a multiple of it"));
}

void resolve_ffn_hidden(LoadContext& ctx) {
  ModelSpec& m = ctx.spec().model;
  const int tp = ctx.spec().parallel.tp;
  if (ctx.any_bad({"model.ffn_hidden", "model.arch", "model.hidden"})) return;
  const bool defaulted = m.ffn_hidden == 0;
  if (defaulted && m.arch != Arch::Gpt2) {
    ctx.error("model.ffn_hidden",
              cat("is required for arch ", to_string(m.arch), " (there is no standard default)"),
              "set model.ffn_hidden, e.g. 14336 for Llama-3-8B (hidden 4096)");
    ctx.mark_bad("model.ffn_hidden");
    return;
  }
  if (defaulted) {
    std::int64_t four_hidden = saturating_product({4, m.hidden});
    if (four_hidden > kMaxInt32) {
      ctx.error("model.hidden",
                cat("the default model.ffn_hidden = 4*hidden = ", four_hidden, " is too large"),
                "use a realistic model.hidden, or set model.ffn_hidden");
      ctx.mark_bad("model.ffn_hidden");
      return;
    }
    m.ffn_hidden = static_cast<int>(four_hidden);
  }
  if (!ctx.any_bad({"parallel.tp"}) && m.ffn_hidden % tp != 0) {
    ctx.error("model.ffn_hidden",
              cat("model.ffn_hidden = ", m.ffn_hidden, defaulted ? " (4*hidden)" : "",
                  " is not divisible by parallel.tp = ", tp, " (the MLP is split over the tp ranks)"),
              cat("use ffn_hidden ", nearby_multiples(m.ffn_hidden, tp)));
  }
}

void resolve_padded_vocab(LoadContext& ctx) {
  ModelSpec& m = ctx.spec().model;
  const int tp = ctx.spec().parallel.tp;
  if (ctx.any_bad({"model.vocab", "parallel.tp"})) return;
  std::int64_t padded = round_up(m.vocab, tp);
  if (padded > kMaxInt32) {
    ctx.error("model.vocab",
              cat("model.vocab = ", m.vocab, " padded to a multiple of parallel.tp = ", tp, " is ", padded,
                  ", which is too large"),
              "use a smaller vocab or tp");
    return;
  }
  m.padded_vocab = static_cast<int>(padded);
  if (padded != m.vocab) {
    ctx.warning("model.vocab",
                cat("model.vocab = ", m.vocab, " is padded to ", padded, " (a multiple of parallel.tp = ", tp,
                    "); the ", padded - m.vocab, " extra rows are never predicted"),
                cat("set model.vocab: ", padded, " to make the padding explicit"));
  }
}

// An upper estimate of the model's parameters in floating point (attention 4 h^2 at most, the MLP's
// three matrices per expert, the embedding and an untied head, GPT-2's position table): a model
// past kMaxParameters would overflow the exact counts validate makes (as negative parameters and
// memory).
void check_parameter_count(LoadContext& ctx) {
  const ModelSpec& m = ctx.spec().model;
  if (ctx.any_bad({"model.layers", "model.hidden", "model.ffn_hidden", "model.vocab", "model.moe.experts",
                   "model.seq_len", "model.arch"}))
    return;
  const double h = m.hidden, experts = m.moe ? m.moe->experts : 1;
  const double positions = m.arch == Arch::Gpt2 ? static_cast<double>(m.seq_len) * h : 0;
  const double params = static_cast<double>(m.layers) * (4 * h * h + 3 * h * m.ffn_hidden * experts) +
                        2 * h * static_cast<double>(m.padded_vocab > 0 ? m.padded_vocab : m.vocab) + positions;
  if (params <= kMaxParameters) return;
  ctx.error("model.hidden", cat("the model has about ", format_number(params), " parameters, more than the ",
                                format_number(kMaxParameters), " ptrain counts"),
            "use a smaller model.hidden, ffn_hidden, layers or vocab");
  ctx.mark_bad("model.hidden");
}

void check_seq_len(LoadContext& ctx) {
  const ModelSpec& m = ctx.spec().model;
  const ParallelSpec& p = ctx.spec().parallel;
  if (!ctx.any_bad({"model.seq_len", "parallel.cp"}) && p.cp > 1 &&
      m.seq_len % (2 * std::int64_t{p.cp}) != 0) {
    std::int64_t chunks = 2 * std::int64_t{p.cp};
    ctx.error("model.seq_len",
              cat("model.seq_len = ", m.seq_len, " is not divisible by 2*parallel.cp = ", chunks,
                  " (context parallelism cuts each sequence into 2*cp chunks to balance causal attention)"),
              cat("use seq_len ", nearby_multiples(m.seq_len, chunks), ", or a smaller parallel.cp"));
  }
  if (ctx.any_bad({"model.seq_len", "parallel.tp", "parallel.cp", "parallel.sequence_parallel"})) return;
  if (!p.sequence_parallel || p.tp == 1) return;
  // Each cp rank holds seq_len/cp tokens, which sequence parallelism splits over the tp ranks.
  std::int64_t parts = saturating_product({p.tp, p.cp});
  if (m.seq_len % parts == 0) return;
  std::string divisor = p.cp > 1 ? cat("parallel.tp*parallel.cp = ", spelled_product({p.tp, p.cp}))
                                 : cat("parallel.tp = ", p.tp);
  ctx.error("model.seq_len",
            cat("model.seq_len = ", m.seq_len, " is not divisible by ", divisor,
                " under parallel.sequence_parallel (each tp rank keeps a slice of the sequence)"),
            cat("use seq_len ", nearby_multiples(m.seq_len, parts), ", or turn sequence_parallel off"));
}

// All-to-all context parallelism (DeepSpeed-Ulysses) gives each cp rank whole heads of the whole
// sequence: the tp rank's query heads split over cp, and its kv heads either split too or, fewer
// than cp, each copied to the ranks whose query heads read it.
void check_cp_comm(LoadContext& ctx) {
  const ModelSpec& m = ctx.spec().model;
  const ParallelSpec& p = ctx.spec().parallel;
  if (ctx.any_bad({"parallel.cp_comm", "parallel.cp", "parallel.tp", "model.heads", "model.kv_heads"})) return;
  if (p.cp == 1 || p.cp_comm != CpComm::A2a || m.heads % p.tp != 0 || m.kv_heads < 1) return;
  const int q_heads = m.heads / p.tp, kv_heads = std::max(m.kv_heads / p.tp, 1);
  if (q_heads % p.cp != 0) {
    ctx.error("parallel.cp_comm",
              cat("cp_comm a2a splits each tp rank's heads/tp = ", q_heads, " query heads over parallel.cp = ",
                  p.cp, ", which does not divide them"),
              cat("use parallel.cp dividing ", q_heads, " (", list_numbers(divisors(q_heads)),
                  "), or cp_comm: ring"));
    return;
  }
  if (kv_heads % p.cp != 0 && p.cp % kv_heads != 0) {
    ctx.error("parallel.cp_comm",
              cat("cp_comm a2a needs the tp rank's ", kv_heads, " kv heads to divide over parallel.cp = ", p.cp,
                  " or cp to be a multiple of them (each cp rank then holds a copy of one)"),
              cat("use parallel.cp dividing ", kv_heads, " or a multiple of it, or cp_comm: ring"));
  }
}

void resolve_tied_embeddings(LoadContext& ctx) {
  ModelSpec& m = ctx.spec().model;
  if (ctx.any_bad({"model.arch", "model.tie_embeddings"}) || m.arch != Arch::Gpt2) return;
  if (ctx.was_written("model.tie_embeddings") && !m.tie_embeddings) {
    ctx.error("model.tie_embeddings",
              "gpt2 always ties the token embedding and the LM head, so it cannot be false",
              "remove model.tie_embeddings (or set it to true), or use arch llama");
  }
  m.tie_embeddings = true;
}

}  // namespace

void resolve_model(LoadContext& ctx) {
  check_heads(ctx);
  resolve_kv_heads(ctx);
  resolve_ffn_hidden(ctx);
  resolve_padded_vocab(ctx);
  check_parameter_count(ctx);
  check_seq_len(ctx);
  check_cp_comm(ctx);
  resolve_tied_embeddings(ctx);
}

}  // namespace ptrain::config
