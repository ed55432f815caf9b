// The activation arena of a Transformer (model/transformer.h), laid out by walking the layer
// description (model/layer_description.h), the list `validate` counts: each described tensor gets
// the buffer its ArenaTensor names. Tensors the recompute mode drops point into the backward
// workspace, which recompute rebuilds.
#include <stdexcept>
#include <unordered_set>

#include "engine/model/transformer.h"

namespace ptrain::model {

using kernels::Buf;
using kernels::DType;
using T = ArenaTensor;

Buf* Transformer::layer_field(LayerActs& a, ArenaTensor id) {
  switch (id) {
    case T::Norm1Mean: return &a.mean1;
    case T::Norm1Rstd: return &a.rstd1;
    case T::Norm1Output: return &a.norm1;
    case T::Q: return &a.q;
    case T::K: return &a.k;
    case T::V: return &a.v;
    case T::AttentionOutput: return &a.att;
    case T::AttentionLse: return &a.lse;
    case T::AttentionHeadsOutput: return &a.att_heads;
    case T::MidResidual: return &a.x_mid;
    case T::Norm2Mean: return &a.mean2;
    case T::Norm2Rstd: return &a.rstd2;
    case T::Norm2Output: return &a.norm2;
    case T::MlpUp: return &a.up;
    case T::MlpGate: return &a.gate;
    case T::MlpActivation: return &a.act;
    case T::MoeProbs: return &a.moe.probs;
    case T::MoeChoice: return &a.moe.choice;
    case T::MoeWeight: return &a.moe.weight;
    case T::MoeSlot: return &a.moe.slot;
    case T::MoeCounts: return &a.moe.counts;
    case T::MoeExpertInput: return &a.moe.expert_in;
    case T::MoeGate: return &a.moe.gate;
    case T::MoeUp: return &a.moe.up;
    case T::MoeActivation: return &a.moe.act;
    case T::MoeExpertOutput: return &a.moe.expert_out;
    case T::Fp8InputAmaxes: return &a.fp8_amax;
    default: return nullptr;
  }
}

Buf* Transformer::output_grad_field(LayerOutputGrads& g, ArenaTensor id) {
  switch (id) {
    case T::DQ: return &g.d_q;
    case T::DK: return &g.d_k;
    case T::DV: return &g.d_v;
    case T::DAttentionOutput: return &g.d_attention;
    case T::DMlpOutput: return &g.d_mlp;
    case T::DMlpUp: return &g.d_up;
    case T::DMlpGate: return &g.d_gate;
    case T::MoeDLogits: return &g.moe.d_logits;
    case T::MoeDGate: return &g.moe.d_gate;
    case T::MoeDUp: return &g.moe.d_up;
    case T::MoeDExpertOutput: return &g.moe.d_expert_out;
    case T::Fp8OutputGradAmaxes: return &g.fp8_amax;
    default: return nullptr;
  }
}

Buf* Transformer::slot_field(Slot& s, ArenaTensor id) {
  switch (id) {
    case T::TokenIds: return &s.tokens;
    case T::FinalNormInput: return &s.x.back();
    case T::FinalNormMean: return &s.meanf;
    case T::FinalNormRstd: return &s.rstdf;
    case T::FinalNormOutput: return &s.normf;
    case T::Logits: return &s.logits;
    case T::Targets: return &s.targets;
    case T::TokenLosses: return &s.losses;
    case T::LossShardStats: return &s.loss_stats;
    default: return nullptr;
  }
}

Buf* Transformer::workspace_field(Workspace& w, ArenaTensor id) {
  switch (id) {
    case T::ProjectionOutput: return &w.proj_out;
    case T::DResidual: return &w.d_res;
    case T::DNorm: return &w.d_norm;
    case T::SpGatheredInput: return &w.gathered;
    case T::SpGatheredGradient: return &w.d_full;
    case T::CpKeys: return &w.cp_k;
    case T::CpValues: return &w.cp_v;
    case T::CpDKeys: return &w.cp_dk;
    case T::CpDValues: return &w.cp_dv;
    case T::CpStaging: return &w.cp_staging;
    case T::CpRingKv: return &w.ring_kv;
    case T::CpRingDKv: return &w.ring_dkv;
    case T::CpRingPart: return &w.ring_part;
    case T::CpRingPartLse: return &w.ring_part_lse;
    case T::CpRingPartDKv: return &w.ring_part_dkv;
    case T::CpA2aQ: return &w.a2a_q;
    case T::CpA2aK: return &w.a2a_k;
    case T::CpA2aV: return &w.a2a_v;
    case T::CpA2aDOutput: return &w.a2a_d_out;
    case T::CpA2aSend: return &w.a2a_send;
    case T::CpA2aRecv: return &w.a2a_recv;
    case T::DAttention: return &w.d_att;
    case T::DMlpActivation: return &w.d_act;
    case T::MoeDWeight: return &w.moe.d_weight;
    case T::MoeDActivation: return &w.moe.d_act;
    case T::MoeDExpertInput: return &w.moe.d_expert_in;
    case T::MoeExchange: return &w.moe.exchange;
    case T::MoeCpOwnSlot: return &w.moe.own_slot;
    case T::MoeCpOwnWeight: return &w.moe.own_weight;
    case T::MoeCpLogits: return &w.moe.logits;
    case T::MoeCpLogitsStaging: return &w.moe.logits_staging;
    case T::MoeCpDWeight: return &w.moe.sequence_d_weight;
    case T::MoeCpDLogits: return &w.moe.sequence_d_logits;
    case T::Fp8Input: return &w.fp8.input;
    case T::Fp8Weight: return &w.fp8.weight;
    case T::Fp8OutputGrad: return &w.fp8.output_grad;
    case T::Fp8Amax: return &w.fp8.amax;
    case T::Fp8OutputGradTransposed: return &w.fp8.output_grad_t;
    case T::Fp8InvScale: return &w.fp8.inv_scale;
    default:  // the layer's output gradients, and what recompute rebuilds
      if (Buf* g = output_grad_field(w.outputs, id)) return g;
      return layer_field(w.recomputed, id);
  }
}

DType Transformer::dtype_of(const SavedTensor& t) const {
  switch (t.element) {
    case Element::Activation: return act_;
    case Element::F32: return DType::F32;
    case Element::I32: return DType::I32;
    case Element::Fp8E4M3: return DType::E4M3;
    case Element::Fp8E5M2: return DType::E5M2;
  }
  return act_;
}

void Transformer::place(Buf* field, const SavedTensor& t, const TakeFromArena& take) const {
  if (field == nullptr)
    throw std::logic_error(std::string("Transformer: the layer description's ") + t.name + " has no buffer in the engine");
  *field = take(t.elements, dtype_of(t));
}

void Transformer::lay_out_workspace(const config::JobSpec& spec, const TakeFromArena& take) {
  // What recompute rebuilds, the output gradients, the backward temporaries; the chunks of one rank
  // share it (they never run at once).
  if (workspace_from_ != nullptr) {
    ws_ = workspace_from_->ws_;
    return;
  }
  for (const SavedTensor& t : backward_workspace(spec)) place(workspace_field(ws_, t.id), t, take);
  if (sends_stage_output(params_.coords()))  // the pipeline message, until sent
    ws_.stage_out = take(static_cast<std::int64_t>(dims_.Ns) * dims_.C, act_);
}

void Transformer::lay_out_slot(const config::JobSpec& spec, const TakeFromArena& take, Slot& s) {
  const std::vector<SavedTensor> layer = layer_saved_activations(spec, config::Recompute::None);
  std::unordered_set<ArenaTensor> kept;
  for (const SavedTensor& t : layer_saved_activations(spec, recompute_)) kept.insert(t.id);
  const std::vector<SavedTensor> output_grads = layer_weight_grad_inputs(spec);
  auto place_into = [&](Buf* field, const SavedTensor& t) { place(field, t, take); };
  s.x.resize(static_cast<size_t>(dims_.layers) + 1);
  if (first_)
    for (const SavedTensor& t : embedding_saved_activations(spec)) place_into(slot_field(s, t.id), t);
  s.layers.resize(static_cast<size_t>(dims_.layers));
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    LayerActs& a = s.layers[l];
    for (const SavedTensor& t : layer) {
      if (t.id == ArenaTensor::LayerInput)
        place_into(&s.x[l], t);
      else if (kept.count(t.id) > 0)
        place_into(layer_field(a, t.id), t);
      else
        *layer_field(a, t.id) = *layer_field(ws_.recomputed, t.id);
    }
  }
  if (split_weight_grad_) {
    s.output_grads.resize(static_cast<size_t>(dims_.layers));
    for (LayerOutputGrads& g : s.output_grads)
      for (const SavedTensor& t : output_grads) place_into(output_grad_field(g, t.id), t);
  }
  if (last_)
    for (const SavedTensor& t : head_saved_activations(spec)) place_into(slot_field(s, t.id), t);
  else
    s.x.back() = ws_.stage_out;
}

}  // namespace ptrain::model
