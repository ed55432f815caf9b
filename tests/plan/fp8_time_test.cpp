// FP8's compute time (plan/fp8_time.h): the linear layers' GEMMs at the FP8 rate and their casts, at
// the peak and from a profile, against the arithmetic of one small Llama layer.
#include "engine/plan/fp8_time.h"

#include <catch2/catch.hpp>

#include "engine/plan/builtin_profile.h"
#include "engine/plan/step_time.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

namespace {

const plan::HardwareProfile& h100() { return *plan::find_hardware("h100-sxm"); }

// kSmallLlama's seven linear layers per layer, (N, K) of each weight, and whether it reads the
// previous one's FP8 codes of its input (k and v q's, up gate's); M = 128 tokens.
struct Linear {
  double n, k;
  bool input_shared = false;
};
constexpr Linear kLinears[] = {{256, 256},       {128, 256, true}, {128, 256, true}, {256, 256},
                               {512, 256},       {512, 256, true}, {256, 512}};
constexpr double kTokens = 128, kLayers = 8;

}  // namespace

TEST_CASE("fp8 cast bytes: each operand read in bf16 and written as codes, current scaling reads it again") {
  // ZeRO-3: weights cast at every use (no codes kept for the step)
  const config::LoadResult delayed = test::load_job(
      test::kSmallLlama, {"train.precision=fp8", "train.fp8.scaling=delayed", "parallel.zero=3"}, 2);
  const config::LoadResult current = test::load_job(
      test::kSmallLlama, {"train.precision=fp8", "train.fp8.scaling=current", "parallel.zero=3"}, 2);
  model::Op op;
  op.gemm = {64, 32, 16, 3};  // M, N, K, three calls
  const plan::Fp8CastBytes d = plan::fp8_cast_bytes(delayed.spec, op);
  CHECK(d.forward == 3 * 3.0 * (64 * 16 + 32 * 16));      // input and weight, 2 bytes read + 1 written
  CHECK(d.input_grad == 3 * 3.0 * (64 * 32 + 32 * 16));   // output gradient and weight
  CHECK(d.weight_grad == 3 * 3.0 * (64 * 32 + 64 * 16));  // output gradient and input
  CHECK(plan::fp8_cast_bytes(current.spec, op).forward == 3 * 5.0 * (64 * 16 + 32 * 16));
  op.fp8_input_shared = true;  // the input's codes another layer cast
  const plan::Fp8CastBytes s = plan::fp8_cast_bytes(delayed.spec, op);
  CHECK(s.forward == 3 * 3.0 * (32 * 16));
  CHECK(s.input_grad == d.input_grad);
  CHECK(s.weight_grad == 3 * 3.0 * (64 * 32));

  // Below ZeRO-3 the weight's codes are kept for the step: cast once, both ways (2 bytes read, 2
  // written; current scaling 2 more read), a 16th of it charged to each of the 16 microbatches'
  // forward, none to the input gradient.
  op.fp8_input_shared = false;
  for (const char* scaling : {"delayed", "current"}) {
    const config::LoadResult kept =
        test::load_job(test::kSmallLlama, {"train.precision=fp8", std::string("train.fp8.scaling=") + scaling}, 1);
    REQUIRE(kept.spec.train.microbatches == 16);
    const double per_element = std::string(scaling) == "current" ? 5.0 : 3.0, weight_cast = per_element + 1;
    const plan::Fp8CastBytes k = plan::fp8_cast_bytes(kept.spec, op);
    CHECK(k.forward == Approx(3 * per_element * 64 * 16 + weight_cast * 32 * 16 / 16));  // one weight, 3 calls
    CHECK(k.input_grad == 3 * per_element * (64 * 32));
    CHECK(k.weight_grad == 3 * per_element * (64 * 32 + 64 * 16));
    // An MoE layer's 8 expert blocks under ep read the rank's 2 experts' weights: two casts a step.
    model::Op experts = op;
    experts.gemm.count = 8;
    experts.weights = 2;
    CHECK(plan::fp8_cast_bytes(kept.spec, experts).forward ==
          Approx(8 * per_element * 64 * 16 + 2 * weight_cast * 32 * 16 / 16));
  }
}

TEST_CASE("fp8 at the peak: the linear layers' FLOPs at 1,979 TFLOP/s, their casts at HBM bandwidth") {
  const config::LoadResult bf16 = test::load_job(test::kSmallLlama, {}, 1);
  const config::LoadResult fp8 = test::load_job(test::kSmallLlama, {"train.precision=fp8"}, 1);
  const pipeline::OpCosts a = plan::stage_op_costs(bf16.spec, h100());
  const pipeline::OpCosts b = plan::stage_op_costs(fp8.spec, h100());
  double flops = 0, forward_casts = 0, input_grad_casts = 0;
  for (const Linear& l : kLinears) {
    flops += 2 * kTokens * l.n * l.k;
    const double per_element = fp8.spec.train.fp8.scaling == config::Fp8Scaling::Current ? 5 : 3;
    // the weight cast once a step, both ways, over the 16 microbatches' forwards
    forward_casts += per_element * (l.input_shared ? 0 : kTokens * l.k) + (per_element + 1) * l.n * l.k / 16;
    input_grad_casts += per_element * kTokens * l.n;
  }
  const double saved = flops * (1 / (989e12 * 0.6) - 1 / (1979e12 * 0.6));
  CHECK(a.forward[0] - b.forward[0] == Approx(kLayers * (saved - forward_casts / 3.35e12)));
  CHECK(a.backward[0] - b.backward[0] == Approx(kLayers * (saved - input_grad_casts / 3.35e12)));
  CHECK(b.forward[0] > a.forward[0]);  // at this size the casts cost more than the FLOPs save

  // Full recompute runs the forward (its casts included) again before the backward.
  const config::LoadResult full = test::load_job(test::kSmallLlama, {"train.precision=fp8", "train.recompute=full"}, 1);
  const config::LoadResult full_bf16 = test::load_job(test::kSmallLlama, {"train.recompute=full"}, 1);
  const double recompute_delta = plan::stage_op_costs(full_bf16.spec, h100()).backward[0] -
                                 plan::stage_op_costs(full.spec, h100()).backward[0];
  CHECK(recompute_delta == Approx(kLayers * (2 * saved - (forward_casts + input_grad_casts) / 3.35e12)));
}

TEST_CASE("fp8 pays on a Llama 3 70B layer: its linear layers' GEMMs at twice the rate, the casts a few percent") {
  const config::LoadResult bf16 = test::load_job(test::kLlama3_70b, {"parallel.pp=8"}, 64);
  const config::LoadResult fp8 = test::load_job(test::kLlama3_70b, {"parallel.pp=8", "train.precision=fp8"}, 64);
  const pipeline::OpCosts a = plan::stage_op_costs(bf16.spec, h100());
  const pipeline::OpCosts b = plan::stage_op_costs(fp8.spec, h100());
  // 10 layers a stage of 8,192 tokens: attention is ~1/5 of the FLOPs, and stays bf16
  CHECK(b.forward[1] / a.forward[1] > 0.5);
  CHECK(b.forward[1] / a.forward[1] < 0.7);
}

TEST_CASE("fp8 from a profile: its bf16 GEMM time at the FP8 rate, plus the casts from its activation table") {
  const config::LoadResult fp8 = test::load_job(test::kSmallLlama, {"train.precision=fp8"}, 1);
  const std::shared_ptr<const plan::MeasuredProfile> profile = plan::builtin_profile(h100());
  const model::ModelOps ops = model::model_ops(fp8.spec);
  int linears = 0;
  for (const model::Op& op : ops.layer) {
    if (!op.fp8) continue;
    ++linears;
    const plan::OpSeconds bf16 = plan::op_seconds(*profile, op, true);
    const plan::OpSeconds got = plan::fp8_op_seconds(fp8.spec, *profile, op);
    const plan::Fp8CastBytes casts = plan::fp8_cast_bytes(fp8.spec, op);
    CHECK(got.forward == Approx(989.0 / 1979 * bf16.forward +
                                plan::memory_seconds(*profile, "activation/bf16", casts.forward, false)));
    CHECK(got.weight_grad == Approx(989.0 / 1979 * bf16.weight_grad +
                                    plan::memory_seconds(*profile, "activation/bf16", casts.weight_grad, false)));
  }
  CHECK(linears == 7);  // q, k, v, o, gate, up, down: not the LM head
  for (const model::Op& op : ops.head) CHECK_FALSE(op.fp8);
}

TEST_CASE("fp8 from a profile with an FP8 GEMM table: its GEMM times as measured, no datasheet ratio") {
  const config::LoadResult fp8 = test::load_job(test::kSmallLlama, {"train.precision=fp8"}, 1);
  plan::MeasuredProfile profile = *plan::builtin_profile(h100());
  plan::GemmTable table = profile.gemm.at("bf16");  // an FP8 table 3x faster than bf16 everywhere
  for (auto* times : {&table.forward_s, &table.input_grad_s, &table.weight_grad_s})
    for (double& t : *times) t /= 3;
  profile.gemm[plan::kFp8GemmElement] = table;
  for (const model::Op& op : model::model_ops(fp8.spec).layer) {
    if (!op.fp8) continue;
    const plan::OpSeconds bf16 = plan::op_seconds(profile, op, true);
    const plan::OpSeconds got = plan::fp8_op_seconds(fp8.spec, profile, op);
    const plan::Fp8CastBytes casts = plan::fp8_cast_bytes(fp8.spec, op);
    auto cast_s = [&](double bytes) { return plan::memory_seconds(profile, "activation/bf16", bytes, false); };
    CHECK(got.forward == Approx(bf16.forward / 3 + cast_s(casts.forward)));
    CHECK(got.input_grad == Approx(bf16.input_grad / 3 + cast_s(casts.input_grad)));
    CHECK(got.weight_grad == Approx(bf16.weight_grad / 3 + cast_s(casts.weight_grad)));
  }
}

TEST_CASE("fp8 current scaling: no amax read for what a norm or activation wrote, nor again in the weight gradient") {
  // ZeRO-3 (weights cast at every use, their amaxes read as before): per cast 2 bytes read and 1
  // written, plus 2 read for the amax where the cast takes it.
  const config::LoadResult current = test::load_job(
      test::kSmallLlama, {"train.precision=fp8", "train.fp8.scaling=current", "parallel.zero=3"}, 2);
  model::Op op;
  op.gemm = {64, 32, 16, 1};
  op.fp8_input_amax_written = true;  // the forward's input: the norm's amax
  const plan::Fp8CastBytes in_written = plan::fp8_cast_bytes(current.spec, op);
  CHECK(in_written.forward == 3.0 * 64 * 16 + 5.0 * 32 * 16);
  CHECK(in_written.weight_grad == 5.0 * (64 * 32 + 64 * 16));  // the weight gradient's still read
  op.fp8_amaxes_kept = true;  // the weight gradient reads the input's and the output gradient's kept
  const plan::Fp8CastBytes kept = plan::fp8_cast_bytes(current.spec, op);
  CHECK(kept.weight_grad == 3.0 * (64 * 32 + 64 * 16));
  CHECK(kept.input_grad == 5.0 * 64 * 32 + 5.0 * 32 * 16);  // the input gradient's part takes it
  op.fp8_output_grad_amax_written = true;  // the activation backward's
  CHECK(plan::fp8_cast_bytes(current.spec, op).input_grad == 3.0 * 64 * 32 + 5.0 * 32 * 16);

  // The layer description says which: every dense linear keeps its amaxes; the norm writes q's and
  // the MLP's first input, SwiGLU down's; its backward gate's and up's output gradients; o's input
  // and the experts' take passes. Under delayed scaling none of it.
  const std::vector<model::Op> ops = model::layer_ops(current.spec);
  auto find = [&](const std::string& name) {
    for (const model::Op& o : ops)
      if (o.name == name) return o;
    FAIL("no op " << name);
    return model::Op{};
  };
  for (const char* name : {"attn.q_proj", "attn.k_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
    CHECK(find(name).fp8_amaxes_kept);
  CHECK(find("attn.q_proj").fp8_input_amax_written);
  CHECK_FALSE(find("attn.o_proj").fp8_input_amax_written);
  CHECK(find("mlp.down_proj").fp8_input_amax_written);
  CHECK(find("mlp.gate_proj").fp8_output_grad_amax_written);
  CHECK(find("mlp.up_proj").fp8_output_grad_amax_written);
  CHECK_FALSE(find("mlp.down_proj").fp8_output_grad_amax_written);
  const config::LoadResult delayed = test::load_job(test::kSmallLlama, {"train.precision=fp8"}, 1);
  for (const model::Op& o : model::layer_ops(delayed.spec))
    CHECK_FALSE((o.fp8_amaxes_kept || o.fp8_input_amax_written || o.fp8_output_grad_amax_written));
}
