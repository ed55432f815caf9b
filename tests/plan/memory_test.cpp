// Memory model: the ZeRO paper's numbers, expert sharding, activations x in-flight, buffers.
#include "engine/plan/memory.h"

#include <catch2/catch.hpp>

#include "engine/model/layer_description.h"
#include "engine/plan/fit.h"
#include "tests/plan/jobs.h"

using namespace ptrain;
using config::Precision;

TEST_CASE("ZeRO paper, figure 1: Psi = 7.5B, Nd = 64, K = 12, with fp32 gradients") {
  // The paper counts 2 + 2 + K bytes per parameter (fp16 gradients). ptrain keeps bf16 weights,
  // fp32 gradients (Megatron's main grads) and K = 12: 2 + 4 + 12. Its totals are the paper's plus
  // the 2 extra gradient bytes (sharded from stage 2 on); at stage 3 the bf16 weights live only in
  // the gather windows, so the shard holds 16 bytes per parameter like the paper's.
  const double psi = 7.5e9;
  CHECK(plan::model_state_bytes(psi, 64, 0, Precision::Bf16).total() == Approx(120e9 + 2 * psi));
  CHECK(plan::model_state_bytes(psi, 64, 1, Precision::Bf16).total() == Approx(31.40625e9 + 2 * psi));
  CHECK(plan::model_state_bytes(psi, 64, 2, Precision::Bf16).total() == Approx(16.640625e9 + 2 * psi / 64));
  CHECK(plan::model_state_bytes(psi, 64, 3, Precision::Bf16).total() == Approx(1.875e9));
  const plan::ModelStateBytes z1 = plan::model_state_bytes(psi, 64, 1, Precision::Bf16);
  CHECK(z1.params == 2 * psi);
  CHECK(z1.grads == 4 * psi);
  CHECK(z1.optimizer == 12 * psi / 64);
}

TEST_CASE("fp32: params 4, grads 4, Adam m + v 8") {
  const plan::ModelStateBytes s = plan::model_state_bytes(1000, 4, 0, Precision::Fp32);
  CHECK(s.params == 4000);
  CHECK(s.grads == 4000);
  CHECK(s.optimizer == 8000);
  CHECK(plan::model_state_bytes(1000, 4, 3, Precision::Fp32).total() == 4000);
}

TEST_CASE("dense params shard over dp*cp, experts over expert-dp = tp*cp*dp/ep") {
  config::JobSpec spec;
  spec.parallel.tp = 2, spec.parallel.cp = 2, spec.parallel.dp = 4, spec.parallel.ep = 4,
  spec.parallel.zero = 3;
  plan::RankParams params;
  params.dense = 800;
  params.expert = 400;
  const plan::ModelStateBytes s = plan::rank_model_state_bytes(spec, params);
  // dense over 8, experts over 2*2*4/4 = 4; the bf16 weights of stage 3 are only gathered.
  CHECK(s.params == 0);
  CHECK(s.grads == 4 * 800 / 8 + 4 * 400 / 4);
  CHECK(s.optimizer == 12 * 800 / 8 + 12 * 400 / 4);
}

TEST_CASE("checkpoint.async: the host copy of a rank's saved chunks, 12 bytes an owned element") {
  config::JobSpec spec;
  spec.parallel.tp = 2, spec.parallel.cp = 2, spec.parallel.dp = 4, spec.parallel.ep = 4, spec.parallel.zero = 1;
  plan::RankParams params;
  params.dense = 800;
  params.expert = 400;
  CHECK(spec.checkpoint.async);                           // the default
  CHECK(plan::checkpoint_copy_bytes(spec, params) == 0);  // no checkpoint.dir: nothing is saved
  spec.checkpoint.dir = "ckpt";
  spec.checkpoint.async = false;
  CHECK(plan::checkpoint_copy_bytes(spec, params) == 0);  // synchronous saves write from the shards
  spec.checkpoint.async = true;
  // Whatever the stage, each rank saves its chunks: dense over dp*cp = 8, experts over expert-dp 4.
  for (const int zero : {0, 1, 3}) {
    spec.parallel.zero = zero;
    CHECK(plan::checkpoint_copy_bytes(spec, params) == 12 * 800 / 8 + 12 * 400 / 4);
  }
  // Delayed FP8 scaling adds rank 0's copy of the amax histories: layers x linears x 3 x length fp32.
  spec.train.precision = Precision::Fp8;
  spec.train.fp8.scaling = config::Fp8Scaling::Delayed;
  spec.model.layers = 3;
  CHECK(model::fp8_linears_per_layer(spec.model) > 0);
  CHECK(plan::checkpoint_copy_bytes(spec, params) ==
        12 * 800 / 8 + 12 * 400 / 4 +
            3.0 * model::fp8_linears_per_layer(spec.model) * spec.model.layers * spec.train.fp8.amax_history * 4);
}

TEST_CASE("activations: each chunk's slots x its microbatch, the shared workspace once, a stage's output") {
  config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.pp=2"}, 2);
  const config::JobSpec& spec = job.spec;
  const double layer = model::total_bytes(model::layer_saved_activations(spec, config::Recompute::None));
  const double ids = model::total_bytes(model::embedding_saved_activations(spec));
  const double head = model::total_bytes(model::head_saved_activations(spec));
  CHECK(plan::ActivationCounts(spec).stage(0, false) == 4 * layer + ids);
  CHECK(plan::ActivationCounts(spec).stage(1, false) == 4 * layer + head);
  const double workspace =
      model::total_bytes(model::backward_workspace(spec)) + plan::cudnn_attention_scratch_bytes(spec, kernels::cudnn_attention_mode());
  const double output = 128.0 * 256 * 2;  // [micro_batch*seq_len, hidden] bf16, kept until sent
  CHECK(plan::ActivationCounts(spec).rank(0, {{2}, {}, 0}) == 2 * (4 * layer + ids) + workspace + output);
  CHECK(plan::ActivationCounts(spec).rank(1, {{1}, {}, 0}) ==
        4 * layer + head + workspace);  // the last stage sends none

  config::LoadResult full = test::load_job(test::kSmallLlama, {"parallel.pp=2", "train.recompute=full"}, 2);
  const double input = model::total_bytes(model::layer_saved_activations(full.spec, config::Recompute::Full));
  CHECK(plan::ActivationCounts(full.spec).rank(0, {{2}, {}, 0}) ==
        2 * (4 * input + ids) + model::total_bytes(model::backward_workspace(full.spec)) +
            plan::cudnn_attention_scratch_bytes(full.spec, kernels::cudnn_attention_mode()) + output);

  // Interleaved: every chunk of the rank with its own slots; only the last chunk of the last rank
  // keeps no output.
  config::LoadResult interleaved = test::load_job(
      test::kSmallLlama, {"parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2"}, 2);
  const config::JobSpec& il = interleaved.spec;
  const double il_layer = model::total_bytes(model::layer_saved_activations(il, il.train.recompute));
  const double il_workspace =
      model::total_bytes(model::backward_workspace(il)) + plan::cudnn_attention_scratch_bytes(il, kernels::cudnn_attention_mode());
  CHECK(plan::ActivationCounts(il).rank(1, {{3, 2}, {}, 0}) ==
        3 * 2 * il_layer + 2 * (2 * il_layer + model::total_bytes(model::head_saved_activations(il))) +
            il_workspace + output);
}

TEST_CASE("communication buffers") {
  // tp 2 with SP, pp 2, dp 2, zero 3: 2 sends in flight of sbh/t, 2 unit gradient windows (fp32) and
  // 2 units of gathered params (bf16); no gradient bucket (dense grads reduce in place); SP's gathered
  // tokens are in the backward workspace. Reducing in bf16 adds one unit of bf16 staging.
  config::LoadResult job = test::load_job(
      test::kSmallLlama,
      {"parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true", "parallel.zero=3"}, 8);
  plan::RankParams params;
  params.dense = 1'000'000;
  params.largest_unit = params.largest_dense_unit = 300'000;
  const double sbh = 128.0 * 256 * 2;
  const pipeline::RankBuffers held{{1}, {}, 2};  // two sends in flight
  CHECK(plan::comm_buffer_bytes(job.spec, params, held) == 2 * sbh / 2 + 2 * 300'000 * 4 + 2 * 300'000 * 2);
  job.spec.train.grad_reduce = Precision::Bf16;
  CHECK(plan::comm_buffer_bytes(job.spec, params, held) ==
        2 * sbh / 2 + 2 * 300'000 * 4 + 2 * 300'000 * 2 + 300'000 * 2);
}

TEST_CASE("cuDNN attention's scratch: GPU bf16 jobs only, row sums, GQA's kv copies, then auto's and fast's dQ or deterministic's dP") {
  using kernels::CudnnAttentionMode;
  config::LoadResult job = test::load_job(test::kSmallLlama, {}, 1);
  config::JobSpec spec = job.spec;
  spec.backend = config::Backend::Auto;
  spec.cluster.gpu = "h100-sxm";
  spec.train.precision = Precision::Bf16;
  const config::ModelSpec& m = spec.model;
  const double batch = spec.train.micro_batch, tokens = batch * m.seq_len, d = m.head_dim();
  const double accumulator = tokens * m.heads * d * 4, row_sums = tokens * m.heads * 4;
  const double kv_copies = m.kv_heads == m.heads ? 0.0 : 2 * tokens * m.heads * d * 2;
  const double d_p = batch * m.heads * double(m.seq_len) * m.seq_len * 2;
  CHECK(plan::cudnn_attention_scratch_bytes(spec, CudnnAttentionMode::Fast) == accumulator + row_sums + kv_copies);
  CHECK(plan::cudnn_attention_scratch_bytes(spec, CudnnAttentionMode::Auto) == accumulator + row_sums + kv_copies);
  CHECK(plan::cudnn_attention_scratch_bytes(spec, CudnnAttentionMode::Deterministic) == d_p + row_sums + kv_copies);
  CHECK(plan::cudnn_attention_scratch_bytes(spec, CudnnAttentionMode::Off) == 0);
  config::JobSpec cpu = spec;
  cpu.backend = config::Backend::Cpu;
  CHECK(plan::cudnn_attention_scratch_bytes(cpu, CudnnAttentionMode::Fast) == 0);
  config::JobSpec fp32 = spec;
  fp32.train.precision = Precision::Fp32;
  CHECK(plan::cudnn_attention_scratch_bytes(fp32, CudnnAttentionMode::Deterministic) == 0);
  // Context parallelism: a rank's queries (seq / cp) against all-gathered keys (seq), or its own.
  config::JobSpec cp = spec;
  cp.parallel.cp = 2;
  cp.parallel.cp_comm = config::CpComm::Allgather;
  const double half = m.seq_len / 2.0;
  CHECK(plan::cudnn_attention_scratch_bytes(cp, CudnnAttentionMode::Deterministic) ==
        batch * m.heads * half * m.seq_len * 2 + batch * half * m.heads * 4 + (kv_copies > 0 ? 2 * batch * m.seq_len * m.heads * d * 2 : 0));
  cp.parallel.cp_comm = config::CpComm::Ring;
  CHECK(plan::cudnn_attention_scratch_bytes(cp, CudnnAttentionMode::Deterministic) ==
        batch * m.heads * half * half * 2 + batch * half * m.heads * 4 + (kv_copies > 0 ? 2 * batch * half * m.heads * d * 2 : 0));
  // a2a: half the heads over the whole sequence, kv copies for those heads only.
  cp.parallel.cp_comm = config::CpComm::A2a;
  CHECK(plan::cudnn_attention_scratch_bytes(cp, CudnnAttentionMode::Deterministic) ==
        batch * (m.heads / 2.0) * m.seq_len * double(m.seq_len) * 2 + batch * half * m.heads * 4 +
            (kv_copies > 0 ? 2 * batch * m.seq_len * (m.heads / 2.0) * d * 2 : 0));
}

TEST_CASE("fp8 below ZeRO-3 keeps each linear layer's weight codes for the step: 2 bytes a weight element") {
  // The FP8 linear weights are attention's and the MLP's: not the norms, the embedding or the head.
  const config::LoadResult bf16 = test::load_job(test::kSmallLlama, {"parallel.tp=2"}, 2);
  const std::vector<model::ParamInfo> registry = model::build_registry(bf16.spec.model);
  std::int64_t linear = 0;
  for (const model::ParamInfo& p : registry) {
    const bool is_linear = p.name.find("_proj.weight") != std::string::npos;
    CHECK(p.fp8_linear == is_linear);
    if (is_linear) linear += p.numel() / 2;  // each split over the 2 tp ranks (8 heads, 4 kv heads)
  }
  const pipeline::ScheduleModel schedule(bf16.spec);
  CHECK(plan::stage_params(bf16.spec, schedule, registry).front().fp8_linear == linear);
  const config::LoadResult fp8 = test::load_job(test::kSmallLlama, {"parallel.tp=2", "train.precision=fp8"}, 2);
  CHECK(model::keeps_fp8_weight_copies(fp8.spec));
  // and a float each (an inverse scale): 7 linear layers of 8 layers
  CHECK(plan::peak_memory(fp8.spec, registry).memory.params - plan::peak_memory(bf16.spec, registry).memory.params ==
        2.0 * linear + 4.0 * 7 * 8);
  // ZeRO-3 gathers a layer's weights only for its use: cast there, nothing kept.
  CHECK_FALSE(model::keeps_fp8_weight_copies(
      test::load_job(test::kSmallLlama, {"train.precision=fp8", "parallel.zero=3"}, 2).spec));
}
