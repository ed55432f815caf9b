#include "engine/config/fp8_cuda.h"

#include <cstdint>
#include <initializer_list>

#include "engine/config/moe_capacity.h"

namespace ptrain::config {
namespace {

constexpr std::int64_t kFp8GemmMultiple = 16;

struct Dimension {
  const char* key;
  std::int64_t value;
  const char* what;
};

}  // namespace

std::optional<Fp8CudaRefusal> fp8_shape_refusal(const JobSpec& spec) {
  if (spec.train.precision != Precision::Fp8) return std::nullopt;
  const ModelSpec& m = spec.model;
  const ParallelSpec& p = spec.parallel;
  const std::int64_t head_dim = m.head_dim(), tp = p.tp;
  const std::int64_t ffn = m.ffn_hidden > 0 ? m.ffn_hidden : 4 * std::int64_t{m.hidden};
  const std::int64_t kv_heads = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const std::int64_t tokens = std::int64_t{spec.train.micro_batch} * m.seq_len / p.cp;
  for (const Dimension& d : std::initializer_list<Dimension>{
           {"model.seq_len", tokens, "a rank's tokens per microbatch (train.micro_batch * model.seq_len / parallel.cp)"},
           {"model.hidden", m.hidden, "model.hidden"},
           {"model.hidden", m.heads / tp * head_dim, "a tp rank's attention columns (model.hidden / parallel.tp)"},
           {"model.kv_heads", kv_heads / tp * head_dim,
            "a tp rank's k/v columns (model.kv_heads / parallel.tp * head dim)"},
           {"model.ffn_hidden", ffn / tp, "a tp rank's MLP columns (model.ffn_hidden / parallel.tp)"},
           {"model.moe.capacity_factor", m.moe ? expert_block_rows(spec) : 0,
            "an expert GEMM's rows (train.micro_batch * the expert capacity, ceil(capacity_factor * top_k * "
            "seq_len / experts) tokens of a sequence)"}}) {
    if (d.value % kFp8GemmMultiple != 0)
      return Fp8CudaRefusal{d.key,
                            "train.precision: fp8 on CUDA runs cuBLASLt's FP8 GEMMs, which take dimensions that are "
                            "multiples of 16 only; " +
                                std::string(d.what) + " is " + std::to_string(d.value),
                            "choose sizes that make it a multiple of 16, or use train.precision: bf16"};
  }
  return std::nullopt;
}

std::optional<Fp8CudaRefusal> fp8_device_refusal(const JobSpec& spec, int compute_capability) {
  if (spec.train.precision != Precision::Fp8 || has_fp8_tensor_cores(compute_capability)) return std::nullopt;
  return Fp8CudaRefusal{"train.precision",
                        "train.precision: fp8 needs FP8 tensor cores (compute capability 8.9 or later: Ada, Hopper); "
                        "this GPU's is " +
                            std::to_string(compute_capability / 10) + "." + std::to_string(compute_capability % 10),
                        "use train.precision: bf16 on this GPU"};
}

}  // namespace ptrain::config
