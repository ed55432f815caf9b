// Communication volumes: ring formulas, and every axis of a small layout worked out by hand.
#include "engine/plan/traffic.h"

#include <catch2/catch.hpp>

#include "engine/model/param_registry.h"
#include "engine/plan/estimate.h"
#include "engine/plan/rank_params.h"
#include "tests/plan/jobs.h"

using namespace ptrain;
using plan::Collective;
using plan::CollectiveKind;

TEST_CASE("ring collectives: bytes one rank sends") {
  CHECK(plan::bytes_sent(Collective{CollectiveKind::AllReduce, 100, 4}) == 150);  // 2(n-1)/n S
  CHECK(plan::bytes_sent(Collective{CollectiveKind::AllGather, 100, 4}) == 75);   // (n-1)/n S
  CHECK(plan::bytes_sent(Collective{CollectiveKind::ReduceScatter, 100, 4}) == 75);
  CHECK(plan::bytes_sent(Collective{CollectiveKind::AllToAll, 100, 4}) == 75);
  CHECK(plan::bytes_sent(Collective{CollectiveKind::SendRecv, 100, 2, 3}) == 300);
  CHECK(plan::bytes_sent(Collective{CollectiveKind::AllReduce, 100, 1}) == 0);
  const plan::HardwareProfile& h100 = *plan::find_hardware("h100-sxm");
  CHECK(plan::seconds(Collective{CollectiveKind::AllGather, 450e9 * 4 / 3, 4}, h100, false) ==
        Approx(1.0 + 5e-6));
}

TEST_CASE("small layout by hand: tp 2, pp 2, dp 2, no SP, zero 0") {
  // s = 128, b = 1, h = 256: sbh = 32768 elements = 65536 bytes bf16. 16 sequences / dp 2 = 8 microbatches.
  config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.tp=2", "parallel.pp=2"}, 8);
  const double S = 65536, m = 8;
  // Rank 0 of the pipeline: embedding (V/t x h = 500 x 256) and 4 layers of
  // 2 norms (512) + q 128x256 + k, v 64x256 + o 256x128 + gate, up 256x256 + down 256x256.
  plan::RankParams first;
  first.dense = 500 * 256 + 4 * (512 + 32768 + 2 * 16384 + 32768 + 3 * 65536);
  REQUIRE(first.dense == 1'309'696);
  const plan::StepTraffic c = plan::step_traffic(job.spec, first, 0);
  // tp, n = 2 (2(n-1)/n = 1): per microbatch 4 layers x 2 all-reduces forward + the embedding's, and
  // 4 x 2 backward. Every axis also all-reduces the gradient norm's sum of squares (one double: 8
  // bytes sent at n = 2).
  const double norm = 8;
  CHECK(c.tp == m * (8 + 1 + 8) * S + norm);
  // pp: one activation forward per microbatch (stage 0 sends no gradient back), full sbh without SP.
  CHECK(c.pp == m * S + norm);
  // dp: all-reduce of the fp32 grads over 2 ranks: 2(n-1)/n * 4 bytes * Psi; half that in bf16.
  CHECK(c.dp_dense == Approx(4.0 * first.dense + norm));
  job.spec.train.grad_reduce = config::Precision::Bf16;
  CHECK(plan::step_traffic(job.spec, first, 0).dp_dense == Approx(2.0 * first.dense + norm));
  CHECK(c.cp == 0);
  CHECK(c.ep == 0);

  // The last stage: 4 layers, the LM head's backward all-reduce and the 3 fp32 loss statistics.
  const plan::StepTraffic last = plan::step_traffic(job.spec, first, 1);
  CHECK(last.tp == m * (8 + 8 + 1) * S + m * 3 * 128 * 4 + norm);
  CHECK(last.pp == m * S + norm);  // gradients backward
}

TEST_CASE("sequence parallelism: all-gather + reduce-scatter instead of all-reduce, same bytes") {
  config::LoadResult ar = test::load_job(test::kSmallLlama, {"parallel.tp=4"}, 4);
  config::LoadResult sp =
      test::load_job(test::kSmallLlama, {"parallel.tp=4", "parallel.sequence_parallel=true"}, 4);
  const plan::StageTraffic a = plan::stage_traffic(ar.spec, 3, 2), s = plan::stage_traffic(sp.spec, 3, 2);
  CHECK(plan::bytes_sent(a.tp_forward) == plan::bytes_sent(s.tp_forward));
  CHECK(s.tp_forward.front().kind == CollectiveKind::AllGather);
  // and p2p messages shrink by t
  CHECK(plan::pipeline_message(sp.spec).bytes * 4 == plan::pipeline_message(ar.spec).bytes);
}

TEST_CASE("sequence parallelism's backward all-gathers inputs and output gradients again (Megatron)") {
  config::LoadResult sp =
      test::load_job(test::kSmallLlama, {"parallel.tp=4", "parallel.sequence_parallel=true"}, 4);
  const plan::StageTraffic c = plan::stage_traffic(sp.spec, 3, 2);  // a middle stage of 2 layers
  const double S = 128 * 256 * 2;                             // hidden: b*s*h bf16
  CHECK(plan::bytes_sent(c.tp_forward) == Approx(2 * (2 + 2) * 0.75 * S));
  CHECK(plan::bytes_sent(c.tp_backward) == Approx(2 * (4 + 2) * 0.75 * S));
}

TEST_CASE("kv heads shared by tp ranks sum their k and v gradients in backward") {
  config::LoadResult shared =
      test::load_job(test::kSmallLlama, {"parallel.tp=8"}, 8);  // 4 kv heads: 2 ranks each
  config::LoadResult own = test::load_job(test::kSmallLlama, {"parallel.tp=4"}, 4);
  const plan::StageTraffic c = plan::stage_traffic(shared.spec, 3, 2);
  REQUIRE(c.tp_backward.size() == 2);
  CHECK(c.tp_backward.back().ranks == 2);
  CHECK(c.tp_backward.back().count == 4);             // d_k and d_v of 2 layers
  CHECK(c.tp_backward.back().bytes == 128 * 32 * 2);  // tokens x head_dim x bf16
  CHECK(plan::stage_traffic(own.spec, 3, 2).tp_backward.size() == 1);
}

TEST_CASE("full recompute repeats the forward collectives in backward") {
  config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.tp=2", "train.recompute=full"}, 2);
  const plan::StageTraffic c = plan::stage_traffic(job.spec, 3, 4);  // a middle stage, no embedding/head
  CHECK(plan::bytes_sent(c.tp_backward) == 2 * plan::bytes_sent(c.tp_forward));
}

TEST_CASE("ZeRO 1 reduce-scatters grads and all-gathers params") {
  plan::RankParams params;
  params.dense = 100'000'000;  // in 4 units of 25M: a collective each
  params.dense_units = 4;
  config::LoadResult z1 = test::load_job(test::kSmallLlama, {"parallel.zero=1"}, 4);
  const plan::DataParallelTraffic c1 = plan::data_parallel_traffic(z1.spec, params);
  REQUIRE(c1.dense.grad_reduction.size() == 1);
  CHECK(c1.dense.grad_reduction[0].kind == CollectiveKind::ReduceScatter);
  CHECK(c1.dense.grad_reduction[0].count == 4);
  // bf16 weights, fp32 gradient reductions (train.grad_reduce's default): 0.75 of 4e8 and 2e8 bytes.
  CHECK(plan::bytes_sent(c1.dense.grad_reduction) == Approx(0.75 * 4e8));
  CHECK(plan::bytes_sent(c1.dense.param_gather_after_step) == Approx(0.75 * 2e8));
  CHECK(c1.dense.param_gather_zero3.empty());
  CHECK(c1.expert.grad_reduction.empty());
}

TEST_CASE("ZeRO 3 gathers the units its windows do not hold, by hand") {
  config::LoadResult z3 = test::load_job(test::kSmallLlama, {"parallel.zero=3"}, 4);
  REQUIRE(z3.spec.train.microbatches == 4);  // 16 / (1 * 4)
  const plan::RankParams params = plan::count_rank_params(
      z3.spec, pipeline::ScheduleModel(z3.spec.schedule.kind, 1, 1, 4),
      model::local_params(model::build_registry(z3.spec.model), model::shard_coords(z3.spec, 0, 0, 0)), 0);
  // Units (padded to 16 x 4 ranks): embedding E = 1000 x 256; each of the 8 layers L = q, o 256 x 256,
  // k, v 128 x 256, gate, up, down 512 x 256, two norms 256; final F = norm 256 + head 1000 x 256.
  const std::int64_t E = 256000, L = 590336, F = 256256;
  // Two windows by unit parity (E 0, layers 1-8, F 9). The first forward gathers all 10 units; each
  // backward finds F and the last layer resident and gathers the other 8; each later forward finds
  // E and the first layer resident and gathers the other 8.
  CHECK(params.zero3_gathered == (E + 8 * L + F) + 4 * (E + 7 * L) + 3 * (7 * L + F));
  CHECK(params.zero3_gather_calls == 10 + 4 * 8 + 3 * 8);
  const plan::DataParallelTraffic c3 = plan::data_parallel_traffic(z3.spec, params);
  CHECK(c3.dense.param_gather_after_step.empty());
  CHECK(plan::bytes_sent(c3.dense.param_gather_zero3) == Approx(0.75 * 2 * params.zero3_gathered));  // bf16
  CHECK(c3.dense.param_gather_zero3[0].count == 66);
}

TEST_CASE("context and expert parallelism by hand") {
  config::LoadResult cp = test::load_job(test::kSmallLlama, {"parallel.cp=4"}, 4);
  // s/cp = 32 tokens; a rank's K,V = 2 * 32 * 4 kv heads * 32 * 2 bytes = 16384 bytes. Forward all-gathers
  // the sequence's (4 ranks' 16384 bytes: each sends 3 of them); backward gathers again and
  // reduce-scatters their gradients.
  const plan::StageTraffic c = plan::stage_traffic(cp.spec, 0, 1);
  CHECK(plan::bytes_sent(c.cp_forward) == 3 * 16384);
  CHECK(plan::bytes_sent(c.cp_backward) == 3 * 2 * 16384);

  config::LoadResult ep =
      test::load_job(test::kMixtral, {"parallel.tp=1", "parallel.sequence_parallel=false"}, 8);
  // one MoE layer: dispatch + combine forward, each (ep-1)/ep of the experts' slots * h * 2 bytes: an
  // expert takes ceil(1.25 * top 2 * 4096 / 8 experts) = 1280 tokens of a sequence, 8 experts' slots
  // = 10240 rows (model/moe_block.h: the capacity-padded buffers travel whole).
  const plan::StageTraffic e = plan::stage_traffic(ep.spec, 0, 1);
  CHECK(plan::bytes_sent(e.ep_forward) == Approx(2 * 7.0 / 8 * 10240 * 4096 * 2));
  CHECK(plan::bytes_sent(e.ep_backward) == plan::bytes_sent(e.ep_forward));
}

TEST_CASE("link tiers: tp within a node is intra-node, dp across nodes is inter-node") {
  // 16 ranks on 2 nodes of 8: tp 8 fills a node, dp 2 spans both.
  config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.tp=8", "cluster.nodes=2"});
  REQUIRE(job.spec.world == 16);
  const plan::Estimate est = plan::estimate(job, *plan::find_hardware("h100-sxm"));
  const plan::CommVolume tp = est.comm_bytes_per_step.at("tp"), dp = est.comm_bytes_per_step.at("dp");
  CHECK(tp.intra_node > 0);
  CHECK(tp.inter_node == 0);
  CHECK(dp.inter_node > 0);
  CHECK(dp.intra_node == 0);
  CHECK(est.comm_bytes_per_step.at("pp").total() == 0);

  // order dp first: dp groups {0,1} stay inside a node, tp groups {0,2,...,14} cross nodes
  config::LoadResult swapped = test::load_job(
      test::kSmallLlama, {"parallel.tp=8", "cluster.nodes=2", "parallel.order=dp-tp-cp-ep-pp"});
  const plan::Estimate est2 = plan::estimate(swapped, *plan::find_hardware("h100-sxm"));
  CHECK(est2.comm_bytes_per_step.at("tp").inter_node > 0);
  CHECK(est2.comm_bytes_per_step.at("dp").inter_node == 0);
  CHECK(est2.step_time_s > est.step_time_s);
}

TEST_CASE("zb-h1's W all-gathers again under SP and reruns the forward under full recompute") {
  const std::vector<std::string> sp = {"parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true"};
  std::vector<std::string> zb = sp;
  zb.push_back("schedule.kind=zb-h1");
  const plan::StageTraffic b = plan::stage_traffic(test::load_job(test::kSmallLlama, sp, 4).spec, 1, 4);
  const plan::StageTraffic w = plan::stage_traffic(test::load_job(test::kSmallLlama, zb, 4).spec, 1, 4);
  const double S = 128 * 256 * 2;  // hidden: b*s*h bf16; the last stage, 4 layers
  // 4 all-gathers per layer and the head's input, each sending half of S at tp 2
  CHECK(plan::bytes_sent(w.tp_backward) - plan::bytes_sent(b.tp_backward) == Approx((4 * 4 + 1) * 0.5 * S));
  zb.push_back("train.recompute=full");
  std::vector<std::string> full = sp;
  full.push_back("train.recompute=full");
  const plan::StageTraffic wf = plan::stage_traffic(test::load_job(test::kSmallLlama, zb, 4).spec, 1, 4);
  const plan::StageTraffic bf = plan::stage_traffic(test::load_job(test::kSmallLlama, full, 4).spec, 1, 4);
  // and each layer's forward again: 2 all-gathers and 2 reduce-scatters
  CHECK(plan::bytes_sent(wf.tp_backward) - plan::bytes_sent(bf.tp_backward) ==
        Approx((4 * 4 + 1 + 4 * 4) * 0.5 * S));
}

TEST_CASE("sequence parallelism sums the norm gradients over tp: per step, per microbatch under ZeRO 2/3") {
  const std::vector<std::string> sp = {"parallel.tp=2", "parallel.sequence_parallel=true"};
  std::vector<std::string> zero2 = sp;
  zero2.push_back("parallel.zero=2");
  const config::LoadResult a = test::load_job(test::kSmallLlama, sp, 2),
                           b = test::load_job(test::kSmallLlama, zero2, 2);
  plan::RankParams params;
  const double per_microbatch = plan::step_traffic(a.spec, params, 0).tp / a.spec.train.microbatches;
  // 8 layers x 2 RMSNorm weights + the final norm, h = 256 fp32 each, all-reduced over 2 ranks
  const double norms = (8 * 2 + 1) * 256 * 4.0;
  CHECK(plan::step_traffic(a.spec, params, 0).tp == Approx(per_microbatch * a.spec.train.microbatches));
  CHECK(plan::step_traffic(b.spec, params, 0).tp - plan::step_traffic(a.spec, params, 0).tp ==
        Approx((b.spec.train.microbatches - 1) * norms));
}

TEST_CASE("sequence parallelism's norm-gradient sums are one call a tensor, timed at the step's end") {
  // issue 44 item 8: a GPT-2 at tp 2 with SP ran 2.33x its CPU prediction; each of these calls costs
  // a host transport's latency, and the step time counted none of them
  const config::LoadResult job =
      test::load_job(test::kSmallLlama, {"parallel.tp=2", "parallel.sequence_parallel=true"}, 2);
  const std::vector<Collective> sums = plan::sequence_parallel_grad_reductions(job.spec, 0, 8);
  REQUIRE(sums.size() == 1);
  CHECK(sums[0].count == 8 * 2 + 1);  // two RMSNorm weights a layer and the final norm: one call each
  CHECK(sums[0].bytes == 256 * 4.0);
  const plan::HardwareProfile& cpu = *plan::find_hardware("cpu");
  const plan::Estimate est = plan::estimate(job, cpu);
  CHECK(est.tp_grads_s == Approx(plan::seconds(sums, cpu, false)));
  CHECK(est.tp_grads_s >= 17 * cpu.intra_node_latency_s);
  CHECK(est.step_time_s == Approx(est.pipeline_s + est.tp_grads_s + est.dp_exposed_s + est.optimizer_s));
  const config::LoadResult plain = test::load_job(test::kSmallLlama, {"parallel.tp=2"}, 2);
  CHECK(plan::sequence_parallel_grad_reductions(plain.spec, 0, 8).empty());
  CHECK(plan::estimate(plain, cpu).tp_grads_s == 0);
}
