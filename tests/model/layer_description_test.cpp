// The layer description against hand-computed sizes of small layers, its scaling laws (sequence
// parallelism, recompute modes, flash attention, context parallelism), its GEMM and attention work
// against the weights, and its collectives.
#include "engine/model/layer_description.h"

#include <stdexcept>

#include <catch2/catch.hpp>

#include "engine/config/moe_capacity.h"
#include "engine/model/param_registry.h"
#include "tests/model/model_specs.h"

using namespace ptrain;
using config::Recompute;

namespace {

// s = 8, b = 2, h = 16, a = 4, g = 2, d = 4, f = 32, bf16.
config::JobSpec small_llama(int tp, bool sequence_parallel) {
  config::JobSpec s;
  s.model = test::llama(2, 16, 4, 2, 32, 64);
  s.model.seq_len = 8;
  s.parallel.tp = tp;
  s.parallel.sequence_parallel = sequence_parallel;
  s.train.micro_batch = 2;
  s.train.precision = config::Precision::Bf16;
  return s;
}

double layer_bytes(const config::JobSpec& spec, Recompute mode) {
  return model::total_bytes(model::layer_saved_activations(spec, mode));
}

std::vector<std::string> names(const std::vector<model::SavedTensor>& list) {
  std::vector<std::string> out;
  for (const auto& t : list) out.push_back(t.name);
  return out;
}

}  // namespace

TEST_CASE("llama layer, tp 2, by hand") {
  const config::JobSpec spec = small_llama(2, false);
  const auto list = model::layer_saved_activations(spec, Recompute::None);
  CHECK(names(list) == std::vector<std::string>{"attn_norm.input", "attn_norm.rstd", "attn_norm.output",
                                                "attn.q", "attn.k", "attn.v", "attn.output", "attn.logsumexp",
                                                "ffn_norm.input", "ffn_norm.rstd", "ffn_norm.output", "mlp.gate",
                                                "mlp.up", "mlp.swiglu"});
  // tokens sb = 16. sbh = 256 elements = 512 B; rstd 16 fp32 = 64 B; q,k,v: 16 * 4 * (2 + 2*1) = 256
  // elements (2 local heads, kv 2/2 = 1) = 512 B; attention out 16 * 4 * 2 = 128 el = 256 B;
  // logsumexp b*a_l*s = 2*2*8 fp32 = 128 B; gate, up, swiglu sbf/t = 256 el = 512 B each.
  CHECK(layer_bytes(spec, Recompute::None) == 8 * 512 + 2 * 64 + 256 + 128);  // 4608
  // selective drops both norm outputs and the SwiGLU output
  CHECK(layer_bytes(spec, Recompute::Selective) == 4608 - 3 * 512);
  // full keeps the layer input
  CHECK(layer_bytes(spec, Recompute::Full) == 512);
  // SP halves the four sbh tensors and the two rstd vectors
  CHECK(layer_bytes(small_llama(2, true), Recompute::None) == 4608 - 4 * 256 - 2 * 32);
  CHECK(layer_bytes(small_llama(2, true), Recompute::Full) == 256);
}

TEST_CASE("gpt2 layer, fp32, by hand") {
  config::JobSpec spec;
  spec.model = test::gpt2_124m();
  spec.model.hidden = 16, spec.model.heads = 4, spec.model.kv_heads = 4, spec.model.ffn_hidden = 64;
  spec.model.seq_len = 8;
  spec.train.micro_batch = 2;
  spec.train.precision = config::Precision::Fp32;
  // sbh = 256 el = 1 KiB; LayerNorm mean + rstd 2*16 fp32 = 128 B; q,k,v 3*sbh = 3 KiB; attention
  // out 1 KiB; logsumexp b*a*s = 2*4*8 fp32 = 256 B; fc and gelu sbf = 1024 el = 4 KiB each.
  CHECK(layer_bytes(spec, Recompute::None) == 5 * 1024 + 3072 + 2 * 4096 + 2 * 128 + 256);
  CHECK(layer_bytes(spec, Recompute::Selective) == layer_bytes(spec, Recompute::None) - 2 * 1024 - 4096);
}

TEST_CASE("scaling laws of the saved set") {
  config::JobSpec spec;
  spec.model = test::llama3_8b();
  spec.train.micro_batch = 1;
  spec.parallel.tp = 8;
  SECTION("sequence parallelism divides the sequence-sharded tensors by t") {
    config::JobSpec sp = spec;
    sp.parallel.sequence_parallel = true;
    for (const Recompute mode : {Recompute::None, Recompute::Selective})
      CHECK(layer_bytes(sp, mode) < layer_bytes(spec, mode));
    CHECK(layer_bytes(sp, Recompute::Full) * 8 == layer_bytes(spec, Recompute::Full));
    // with SP every entry is 1/t of tp = 1 (attention and MLP tensors are tp-split anyway)
    config::JobSpec single = spec;
    single.parallel.tp = 1;
    CHECK(layer_bytes(sp, Recompute::None) * 8 == layer_bytes(single, Recompute::None));
  }
  SECTION("recompute: none > selective >> full") {
    spec.parallel.sequence_parallel = true;
    CHECK(layer_bytes(spec, Recompute::Selective) < layer_bytes(spec, Recompute::None));
    CHECK(layer_bytes(spec, Recompute::Full) * 8 < layer_bytes(spec, Recompute::Selective));
  }
  SECTION("flash attention: no s^2 term, bytes are linear in s") {
    config::JobSpec longer = spec;
    longer.model.seq_len *= 2;
    CHECK(layer_bytes(longer, Recompute::None) == 2 * layer_bytes(spec, Recompute::None));
  }
  SECTION("context parallelism splits the sequence") {
    config::JobSpec cp = spec;
    cp.parallel.cp = 2;
    CHECK(2 * layer_bytes(cp, Recompute::None) == layer_bytes(spec, Recompute::None));
  }
}

TEST_CASE("moe layer: capacity-bounded expert buffers") {
  config::JobSpec spec = small_llama(1, false);
  spec.model.arch = config::Arch::Mixtral;
  spec.model.moe = config::MoeSpec{8, 2, 1.25, 0.01};
  spec.parallel.ep = 2;
  // capacity = min(8, ceil(1.25 * 2 * 8 / 8)) = 3 tokens of each sequence per expert; an expert takes
  // 3 of each of the micro_batch * ep = 4 sequences its ep group routes; 4 local experts.
  CHECK(config::expert_capacity(spec) == 3);
  CHECK(config::expert_token_slots(spec) == 48);
  spec.model.moe->capacity_factor = 100;  // never more than the sequence
  CHECK(config::expert_capacity(spec) == 8);
  spec.model.moe->capacity_factor = 1.25;
  const auto list = model::layer_saved_activations(spec, Recompute::None);
  double moe = 0;
  for (const auto& t : list)
    if (std::string(t.name).rfind("moe.", 0) == 0) moe += t.bytes();
  // router probs 16*8 fp32; choices, weights, slots 32 x 4 B each; counts 2*8 fp32; expert input 48*16
  // bf16, w1/w3/swiglu 3 * 48*32 bf16, expert output 48*16 bf16
  CHECK(moe == 16 * 8 * 4 + 3 * 32 * 4 + 2 * 8 * 4 + 48 * 16 * 2 + 3 * 48 * 32 * 2 + 48 * 16 * 2);
}

TEST_CASE("stage extras") {
  const config::JobSpec spec = small_llama(2, false);
  CHECK(model::total_bytes(model::embedding_saved_activations(spec)) == 16 * 4);  // token ids
  // final norm: input + output sbh (512 B each) + rstd 64 B; logits sb*V/t = 16*32 bf16; targets 16
  // int32; per-token loss 16 fp32; the vocab-parallel loss's stats of t = 2 shards, 3 fp32 per token
  CHECK(model::total_bytes(model::head_saved_activations(spec)) ==
        2 * 512 + 64 + 16 * 32 * 2 + 16 * 4 + 16 * 4 + 2 * 16 * 3 * 4);
}

TEST_CASE("backward workspace: recomputed tensors per mode plus the backward temporaries") {
  config::JobSpec spec = small_llama(1, false);
  spec.train.recompute = config::Recompute::None;
  const double temps = model::total_bytes(model::backward_workspace(spec));
  const std::int64_t n = spec.train.micro_batch * spec.model.seq_len;
  const std::int64_t h = spec.model.hidden, f = spec.model.ffn_hidden, d = spec.model.head_dim();
  const int a = spec.train.precision == config::Precision::Bf16 ? 2 : 4;
  // 3 x [n,h] (the projection output, the residual's and the norm's gradients) + d_attention, d_q
  // [n, heads*d] + d_k, d_v [n, kv*d] + 3 x [n,f] (SwiGLU has a gate)
  CHECK(temps == static_cast<double>(a * (3 * n * h + 2 * n * spec.model.heads * d + 2 * n * spec.model.kv_heads * d +
                                          3 * n * f)));
  spec.train.recompute = config::Recompute::Selective;
  const double dropped = model::total_bytes(model::layer_saved_activations(spec, config::Recompute::None)) -
                         model::total_bytes(model::layer_saved_activations(spec, config::Recompute::Selective));
  CHECK(model::total_bytes(model::backward_workspace(spec)) == temps + dropped);
  spec.train.recompute = config::Recompute::Full;
  const double rebuilt = model::total_bytes(model::layer_saved_activations(spec, config::Recompute::None)) -
                         model::total_bytes(model::layer_saved_activations(spec, config::Recompute::Full));
  CHECK(model::total_bytes(model::backward_workspace(spec)) == temps + rebuilt);
}

namespace {

double gemm_flops(const std::vector<model::Op>& ops) {
  double sum = 0;
  for (const model::Op& op : ops)
    if (op.kind == model::OpKind::Gemm) sum += op.gemm.forward_flops();
  return sum;
}

const model::Op& op_named(const std::vector<model::Op>& ops, const std::string& name) {
  for (const model::Op& op : ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("a dense layer's GEMMs are its weights' work: 2 FLOPs per weight per token of the rank") {
  for (const int tp : {1, 2}) {
    for (config::JobSpec spec : {small_llama(tp, false), small_llama(tp, true)}) {
      for (const config::Arch arch : {config::Arch::Llama, config::Arch::Gpt2}) {
        spec.model.arch = arch;
        if (arch == config::Arch::Gpt2) spec.model.kv_heads = spec.model.heads;  // no GQA
        double layer_weights = 0;  // layer 0's 2-D weights, whole
        for (const model::ParamInfo& p : model::build_registry(spec.model))
          if (p.layer == 0 && p.is_matmul()) layer_weights += static_cast<double>(p.numel());
        const double tokens = static_cast<double>(spec.train.micro_batch) * spec.model.seq_len / tp;
        INFO("tp " << tp << " sp " << spec.parallel.sequence_parallel);
        CHECK(gemm_flops(model::layer_ops(spec)) == 2 * tokens * layer_weights);
      }
    }
  }
}

TEST_CASE("attention: exact causal work, and context parallel ranks share it evenly") {
  config::JobSpec spec = small_llama(1, false);  // s = 8, b = 2, 4 heads of d = 4
  const model::AttentionShape one = op_named(model::layer_ops(spec), "attn.core").attention;
  // Query i sees i + 1 keys: 36 pairs per sequence and head, 4 FLOPs per pair and head dim.
  CHECK(one.forward_flops() == 4.0 * 36 * 2 * 4 * 4);
  spec.parallel.cp = 2;  // rank 0 holds chunks 0 and 3 of 2 positions: 3 + (2*6 + 3) = 18 pairs
  const model::AttentionShape half = op_named(model::layer_ops(spec), "attn.core").attention;
  CHECK(half.forward_flops() == 4.0 * 18 * 2 * 4 * 4);
  CHECK(2 * half.forward_flops() == one.forward_flops());
}

TEST_CASE("the collectives of a layer: Megatron's f and g, sequence parallelism's gathers, cp and kv copies") {
  using K = model::CollectiveKind;
  auto kinds = [](const std::vector<model::Op>& ops, model::Axis axis, bool backward) {
    std::vector<K> out;
    for (const model::Op& op : ops)
      if (op.kind == model::OpKind::Collective && op.collective.axis == axis)
        for (K k : backward ? op.collective.backward : op.collective.forward) out.push_back(k);
    return out;
  };
  CHECK(kinds(model::layer_ops(small_llama(1, false)), model::Axis::Tp, false).empty());
  const auto plain = model::layer_ops(small_llama(2, false));
  CHECK(kinds(plain, model::Axis::Tp, false) == std::vector<K>{K::AllReduce, K::AllReduce});
  CHECK(kinds(plain, model::Axis::Tp, true) == std::vector<K>{K::AllReduce, K::AllReduce});
  const auto sp = model::layer_ops(small_llama(2, true));
  CHECK(kinds(sp, model::Axis::Tp, false) ==
        std::vector<K>{K::AllGather, K::ReduceScatter, K::AllGather, K::ReduceScatter});
  CHECK(kinds(sp, model::Axis::Tp, true) == std::vector<K>{K::AllGather, K::ReduceScatter, K::AllGather,
                                                           K::AllGather, K::ReduceScatter, K::AllGather});
  // 2 kv heads over tp 4: pairs of ranks hold one kv head and sum its k and v gradients.
  const model::Op copies = op_named(model::layer_ops(small_llama(4, true)), "attn.kv_copies");
  CHECK(copies.collective.ranks == 2);
  CHECK(copies.collective.backward == std::vector<K>{K::AllReduce, K::AllReduce});
  config::JobSpec cp = small_llama(1, false);
  cp.parallel.cp = 2;
  CHECK(kinds(model::layer_ops(cp), model::Axis::Cp, true) == std::vector<K>{K::AllGather, K::ReduceScatter});
  cp.train.recompute = Recompute::Full;  // the redone forward just gathered k and v
  CHECK(kinds(model::layer_ops(cp), model::Axis::Cp, true) == std::vector<K>{K::ReduceScatter});
}

TEST_CASE("moe layer: every local expert's GEMMs cover the rank's slots") {
  config::JobSpec spec = small_llama(1, false);
  spec.model.arch = config::Arch::Mixtral;
  spec.model.moe = config::MoeSpec{8, 2, 1.25, 0.01};
  spec.parallel.ep = 2;
  const auto ops = model::layer_ops(spec);
  const model::GemmShape w1 = op_named(ops, "moe.w1").gemm;
  // 8 blocks of R = micro_batch 2 x capacity 3 slots: each of the 4 local experts, from each of 2 ranks
  CHECK(w1.m == 6);
  CHECK(w1.count == 8);
  CHECK(w1.m * w1.count == config::expert_token_slots(spec));
  CHECK(op_named(ops, "moe.dispatch_exchange").collective.forward == std::vector<model::CollectiveKind>{
                                                                          model::CollectiveKind::AllToAll});
}
