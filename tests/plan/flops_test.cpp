// FLOPs: the 6N + attention formula on published models, recompute, and the per-stage split.
#include "engine/plan/flops.h"

#include <catch2/catch.hpp>

#include "engine/model/param_registry.h"
#include "tests/model/model_specs.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

TEST_CASE("matmul params: GPT-2 124M and Mixtral's active share") {
  const config::ModelSpec gpt2 = test::gpt2_124m();
  const plan::MatmulParams g = plan::matmul_params(model::build_registry(gpt2), gpt2);
  // 12 layers x 12 h^2 (c_attn 3h^2, c_proj h^2, c_fc and mlp.c_proj 4h^2 each) + the tied head V*h
  CHECK(g.total() - g.head == 12.0 * 12 * 768 * 768);
  CHECK(g.head == 50257.0 * 768);
  CHECK(g.total() == 123'532'032);

  const config::ModelSpec mixtral = test::mixtral_8x7b();
  const plan::MatmulParams x = plan::matmul_params(model::build_registry(mixtral), mixtral);
  // per layer: attention 2*4096^2 + 2*1024*4096, router 8*4096, 2 of 8 experts x 3*4096*14336; head
  CHECK(x.layer[0] == 2.0 * 4096 * 4096 + 2.0 * 1024 * 4096 + 8 * 4096 + 2 * 3.0 * 4096 * 14336);
  CHECK(x.total() == 12'748'587'008);
}

TEST_CASE("model FLOPs = tokens * (6 N + 6 L s a d), and full recompute adds one forward of the layers") {
  config::LoadResult job = test::load_job(R"(
model: {arch: gpt2, layers: 12, hidden: 768, heads: 12, vocab: 50257, seq_len: 1024}
train: {global_batch: 512, micro_batch: 32, recompute: none}
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}
)");
  const config::JobSpec& spec = job.spec;
  const plan::MatmulParams m = plan::matmul_params(model::build_registry(spec.model), spec.model);
  const double tokens = 512.0 * 1024;
  const double attention = 6.0 * 12 * 1024 * 768;  // 6 L s (a d), causal
  const plan::StepFlops f = plan::step_flops(spec, m);
  CHECK(f.model == Approx(tokens * (6 * 123'532'032.0 + attention)).epsilon(1e-12));
  CHECK(f.hardware == f.model);

  config::JobSpec full = spec;
  full.train.recompute = config::Recompute::Full;
  const plan::StepFlops ff = plan::step_flops(full, m);
  CHECK(ff.model == f.model);
  CHECK(ff.hardware == Approx(f.model + tokens * (2 * 12.0 * 12 * 768 * 768 + attention / 3)).epsilon(1e-12));
}

TEST_CASE("per-stage FLOPs add up to the model FLOPs") {
  config::LoadResult job = test::load_job(
      test::kSmallLlama,
      {"parallel.tp=2", "parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2"}, 8);
  const config::JobSpec& spec = job.spec;
  const plan::MatmulParams m = plan::matmul_params(model::build_registry(spec.model), spec.model);
  const plan::StageFlops stages = plan::stage_flops(spec, m);
  REQUIRE(stages.forward.size() == 4);
  double forward = 0;
  for (double f : stages.forward) forward += f;
  // one rank's share x tp ranks x microbatches x dp replicas, forward + 2x backward
  CHECK(3 * forward * spec.parallel.tp * spec.train.microbatches * spec.parallel.dp ==
        Approx(plan::step_flops(spec, m).model).epsilon(1e-12));
  CHECK(stages.forward[3] > stages.forward[0]);  // the last virtual stage runs the LM head
  for (double r : stages.recompute) CHECK(r == 0);
}
