// Measured profiles: reading between grid points (exact for the power laws GEMMs, attention and
// memory-bound ops follow on an ideal machine), the JSON file and its errors, and a stage's compute
// timed op by op from the layer description.
#include "engine/plan/measured_profile.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include <catch2/catch.hpp>

#include "engine/plan/compute_time.h"
#include "engine/plan/hardware.h"
#include "engine/plan/step_time.h"
#include "engine/plan/traffic.h"
#include "tests/plan/jobs.h"

using namespace ptrain;
using Catch::Matchers::Contains;

namespace {

constexpr double kFlopsPerS = 1e11;  // GEMM and attention
constexpr double kBytesPerS = 1e10, kLatencyS = 2e-6;

// An ideal machine: GEMMs at a constant throughput (input and weight gradients each as much as the
// forward), attention at a constant time per query-key pair, memory-bound ops a latency plus bytes
// at a bandwidth (backward twice the forward).
plan::MeasuredProfile ideal() {
  plan::MeasuredProfile p;
  p.device = "ideal", p.backend = "cuda", p.date = "2026-11-26", p.ptrain_version = "test";
  plan::GemmTable g{{16, 256, 4096}, {16, 256, 4096}, {16, 256, 4096}, {}, {}, {}};
  for (auto m : g.m)
    for (auto n : g.n)
      for (auto k : g.k) {
        const double s = 2.0 * m * n * k / kFlopsPerS;
        g.forward_s.push_back(s), g.input_grad_s.push_back(s), g.weight_grad_s.push_back(s);
      }
  p.gemm["f32"] = p.gemm["bf16"] = g;
  plan::AttentionTable a;
  a.batch = 1, a.heads = 4, a.kv_heads = 4, a.head_dim = 64, a.seq = {128, 1024, 8192};
  for (auto s : a.seq) {
    const double pairs = s * (s + 1) / 2.0 * a.heads;
    a.forward_s.push_back(4.0 * pairs * a.head_dim / kFlopsPerS);
    a.backward_s.push_back(2.5 * 4.0 * pairs * a.head_dim / kFlopsPerS);
  }
  p.attention["f32"] = p.attention["bf16"] = {a};
  for (const char* family : {"norm", "layernorm", "rope", "activation", "gelu", "routing", "embedding", "loss"})
    for (const char* element : {"f32", "bf16"})
      for (double bytes : {1e4, 1e6, 1e8})
        p.memory[std::string(family) + "/" + element].push_back(
            {bytes, kLatencyS + bytes / kBytesPerS, 2 * (kLatencyS + bytes / kBytesPerS)});
  p.memory["optimizer/f32"] = {{4e6, 1e-3, 1e-3}, {4e8, 1e-1, 1e-1}};
  return p;
}

model::Op gemm_op(std::int64_t m, std::int64_t n, std::int64_t k) {
  model::Op op;
  op.kind = model::OpKind::Gemm;
  op.gemm = {m, n, k, 3};
  return op;
}

}  // namespace

TEST_CASE("a GEMM between and beyond the grid reads the edge's throughput") {
  const plan::MeasuredProfile p = ideal();
  for (const auto& [m, n, k] : {std::tuple{16, 256, 4096}, {100, 700, 3000}, {8, 50000, 100}, {9000, 9000, 9000}}) {
    const model::Op op = gemm_op(m, n, k);
    const plan::OpSeconds s = plan::op_seconds(p, op, false);
    const double expected = op.gemm.forward_flops() / kFlopsPerS;  // 3 blocks
    CHECK(s.forward == Approx(expected).epsilon(1e-9));
    CHECK(s.input_grad == Approx(expected).epsilon(1e-9));
    CHECK(s.weight_grad == Approx(expected).epsilon(1e-9));
  }
}

TEST_CASE("attention reads a time per query-key pair, memory-bound ops a latency and a bandwidth") {
  const plan::MeasuredProfile p = ideal();
  model::Op op;
  op.kind = model::OpKind::Attention;
  op.attention = {2, 8, 2, 128, {{300, 0}}};
  const plan::OpSeconds s = plan::op_seconds(p, op, true);
  CHECK(s.forward == Approx(op.attention.forward_flops() / kFlopsPerS).epsilon(1e-9));
  CHECK(s.input_grad == Approx(2.5 * s.forward).epsilon(1e-9));
  model::Op norm;
  norm.kind = model::OpKind::Norm;
  for (double bytes : {5e3, 3e5, 4e9}) {
    norm.memory_bytes = bytes;
    CHECK(plan::op_seconds(p, norm, false).forward == Approx(kLatencyS + bytes / kBytesPerS));
    CHECK(plan::op_seconds(p, norm, false).input_grad == Approx(2 * (kLatencyS + bytes / kBytesPerS)));
  }
}

TEST_CASE("the profile file round-trips, and a bad one names its field") {
  const plan::MeasuredProfile p = ideal();
  const plan::MeasuredProfile back = plan::from_json(plan::to_json(p));
  CHECK(back.device == "ideal");
  CHECK(back.gemm.at("f32").forward_s == p.gemm.at("f32").forward_s);
  CHECK(back.attention.at("bf16").front().seq == p.attention.at("bf16").front().seq);
  CHECK(back.memory.at("loss/f32").back().backward_s == p.memory.at("loss/f32").back().backward_s);
  CHECK_THROWS_WITH(plan::from_json("{"), Contains("not JSON"));
  std::string text = plan::to_json(p);
  CHECK_THROWS_WITH(plan::from_json(std::string(text).replace(text.find("ptrain.profile.v2"), 17, "ptrain.profile.v1")),
                    Contains("schema"));
  plan::MeasuredProfile unsorted = p;
  unsorted.gemm["f32"].m = {256, 16, 4096};
  CHECK_THROWS_WITH(plan::from_json(plan::to_json(unsorted)), Contains("gemm.f32.m") && Contains("ascend"));
  plan::MeasuredProfile short_list = p;
  short_list.gemm["bf16"].weight_grad_s.pop_back();
  CHECK_THROWS_WITH(plan::from_json(plan::to_json(short_list)), Contains("gemm.bf16.weight_grad_s"));
  plan::MeasuredProfile days = p;  // no estimate from a profile overflows: an op takes at most a day
  days.gemm["f32"].forward_s.back() = 1e300;
  CHECK_THROWS_WITH(plan::from_json(plan::to_json(days)), Contains("gemm.f32.forward_s") && Contains("at most a day"));
  plan::MeasuredProfile scaled = p;
  scaled.calibration = plan::Calibration{"job", 1, 1, 1e300, ""};
  CHECK_THROWS_WITH(plan::from_json(plan::to_json(scaled)), Contains("calibration.compute_scale"));
  scaled.calibration->compute_scale = 1e-300;
  CHECK_THROWS_WITH(plan::from_json(plan::to_json(scaled)), Contains("calibration.compute_scale"));
  plan::MeasuredProfile with_fp8 = p;  // the FP8 GEMM table: a GEMM table alone, no attention or memory
  with_fp8.gemm[plan::kFp8GemmElement] = p.gemm.at("bf16");
  CHECK(plan::from_json(plan::to_json(with_fp8)).gemm.at("fp8").weight_grad_s == p.gemm.at("bf16").weight_grad_s);
  plan::MeasuredProfile no_rope = p;
  no_rope.memory.erase("rope/bf16");
  CHECK_THROWS_WITH(plan::from_json(plan::to_json(no_rope)), Contains("memory.rope/bf16") && Contains("missing"));
  // Fields read by type (a wrong one was an internal error) and counts that fit an int (2^32 cores
  // read as 0, which the model divides by).
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = plan::to_json(p);
    REQUIRE(t.find(from) != std::string::npos);
    return plan::from_json(t.replace(t.find(from), from.size(), to));
  };
  CHECK_THROWS_WITH(edited("\"quick\": false", "\"quick\": \"yes\""), Contains("quick") && Contains("true or false"));
  const std::string cores = "\"cores\": " + std::to_string(p.cores);
  CHECK_THROWS_WITH(edited(cores, "\"cores\": 4294967296"), Contains("cores") && Contains("at most 1048576"));
  CHECK_THROWS_WITH(edited(cores, "\"cores\": 0"), Contains("cores") && Contains("positive integer"));
  plan::MeasuredProfile no_attention = p;
  no_attention.attention.erase("f32");
  model::Op op;
  op.kind = model::OpKind::Attention;
  op.attention = {1, 1, 1, 64, {{8, 0}}};
  CHECK_THROWS_WITH(plan::op_seconds(no_attention, op, false), Contains("no attention table for f32"));
}

TEST_CASE("a stage's compute is its ops' times: recompute adds to B, zb-h1's W rebuilds once more") {
  const plan::MeasuredProfile p = ideal();
  config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.tp=2", "parallel.pp=2"}, 4);
  REQUIRE(job.ok());
  config::JobSpec& spec = job.spec;
  const model::ModelOps ops = model::model_ops(spec);
  const double gemm_flops = [&] {
    double f = 0;
    for (const model::Op& op : ops.layer)
      if (op.kind == model::OpKind::Gemm) f += op.gemm.forward_flops();
    return f;
  }();
  const plan::StageCompute none = plan::stage_compute(spec, ops, p, 0, 4);  // a first stage of 4 layers
  CHECK(none.weight_grad.gemm == Approx(4 * gemm_flops / kFlopsPerS));
  CHECK(none.forward.memory > 0);  // norms, RoPE, SwiGLU, the embedding
  spec.train.recompute = config::Recompute::Full;
  const plan::StageCompute full = plan::stage_compute(spec, model::model_ops(spec), p, 0, 4);
  const double layers_forward = none.forward.total() - plan::stage_compute(spec, ops, p, 0, 0).forward.total();
  CHECK(full.backward.total() == Approx(none.backward.total() + layers_forward));
  CHECK(full.weight_grad.total() == Approx(none.weight_grad.total()));
  spec.schedule.kind = config::ScheduleKind::ZbH1;
  CHECK(plan::stage_compute(spec, model::model_ops(spec), p, 0, 4).weight_grad.total() ==
        Approx(none.weight_grad.total() + layers_forward));
  spec.schedule.kind = config::ScheduleKind::OneFOneB;
  spec.train.recompute = config::Recompute::Selective;
  const plan::StageCompute selective = plan::stage_compute(spec, model::model_ops(spec), p, 0, 4);
  CHECK(selective.backward.total() > none.backward.total());
  CHECK(selective.backward.total() < full.backward.total());
  CHECK(selective.backward.gemm == Approx(none.backward.gemm));  // only norms and SwiGLU are redone
}

TEST_CASE("a CPU profile's times are per machine: ranks sharing its cores compute slower") {
  plan::MeasuredProfile gpu = ideal(), cpu = ideal();
  cpu.backend = "cpu", cpu.threads = 2, cpu.cores = 2;
  for (const int ranks : {1, 2, 4}) {
    config::LoadResult job = test::load_job(test::kSmallLlama, {}, ranks);
    REQUIRE(job.ok());
    job.spec.cluster.gpus_per_node = ranks;
    const model::ModelOps ops = model::model_ops(job.spec);
    const double on_gpu = plan::stage_compute(job.spec, ops, gpu, 0, 4).forward.total();
    // 1 rank: both threads; 2 ranks: one thread each; 4 ranks: one thread each, two per core.
    CHECK(plan::stage_compute(job.spec, ops, cpu, 0, 4).forward.total() == Approx(on_gpu * ranks));
  }
}

TEST_CASE("a calibrated profile scales every stage's compute by its measured compute_scale") {
  plan::MeasuredProfile calibrated = ideal();
  calibrated.calibration = plan::Calibration{"reference", 0.3, 0.25, 1.2, ""};
  const plan::MeasuredProfile back = plan::from_json(plan::to_json(calibrated));
  REQUIRE(back.calibration.has_value());
  CHECK(back.calibration->job == "reference");
  CHECK(back.calibration->compute_scale == 1.2);
  CHECK(back.calibration->job_yaml.empty());  // a profile from before it was kept
  calibrated.calibration->job_yaml = "name: calibration\nbackend: cpu\n";
  CHECK(plan::from_json(plan::to_json(calibrated)).calibration->job_yaml == calibrated.calibration->job_yaml);
  CHECK_FALSE(plan::from_json(plan::to_json(ideal())).calibration.has_value());
  std::string text = plan::to_json(calibrated);
  CHECK_THROWS_WITH(plan::from_json(text.replace(text.find("1.2"), 3, "-1")), Contains("calibration.compute_scale"));
  config::LoadResult job = test::load_job(test::kSmallLlama, {}, 1);
  REQUIRE(job.ok());
  const model::ModelOps ops = model::model_ops(job.spec);
  const plan::StageCompute plain = plan::stage_compute(job.spec, ops, ideal(), 0, 4);
  const plan::StageCompute scaled = plan::stage_compute(job.spec, ops, calibrated, 0, 4);
  CHECK(scaled.forward.total() == Approx(1.2 * plain.forward.total()));
  CHECK(scaled.backward.gemm == Approx(1.2 * plain.backward.gemm));
  CHECK(scaled.weight_grad.memory == Approx(1.2 * plain.weight_grad.memory));
}

TEST_CASE("measured collectives: read between sizes, a group of another size at equal traffic per rank") {
  plan::MeasuredProfile p = ideal();
  CHECK_FALSE(plan::collective_seconds(p, model::CollectiveKind::AllReduce, 2, 1e6));  // none measured
  plan::CollectiveTable t;
  t.ranks = 2, t.transport = "gloo";
  for (const model::CollectiveKind kind :
       {model::CollectiveKind::AllReduce, model::CollectiveKind::AllGather, model::CollectiveKind::ReduceScatter,
        model::CollectiveKind::AllToAll, model::CollectiveKind::SendRecv})
    t.points[plan::collective_name(kind)] = {{1e3, 1e-4 + 1e3 / 1e9}, {1e6, 1e-4 + 1e6 / 1e9}, {1e8, 1e-4 + 1e8 / 1e9}};
  p.collectives = t;
  using K = model::CollectiveKind;
  CHECK(*plan::collective_seconds(p, K::AllReduce, 2, 5e6) == Approx(1e-4 + 5e6 / 1e9));
  CHECK(*plan::collective_seconds(p, K::AllGather, 2, 4e8) == Approx(1e-4 + 4e8 / 1e9));  // beyond: the last slope
  // 4 ranks each send 3/4 S where the measured 2 sent 1/2 S: as the 2-rank S x 1.5.
  CHECK(*plan::collective_seconds(p, K::AllGather, 4, 2e6) == Approx(1e-4 + 3e6 / 1e9));
  CHECK(*plan::collective_seconds(p, K::SendRecv, 4, 2e6) == Approx(1e-4 + 2e6 / 1e9));
  CHECK_FALSE(plan::collective_seconds(p, K::AllReduce, 1, 1e6));
  // Inside a node the traffic model uses them; between nodes the link model stays.
  plan::HardwareProfile hw = *plan::find_hardware("cpu");
  hw.measured = std::make_shared<const plan::MeasuredProfile>(p);
  const plan::Collective c{K::AllReduce, 5e6, 2, 3};
  CHECK(plan::seconds(c, hw, false) == Approx(3 * (1e-4 + 5e6 / 1e9)));
  CHECK(plan::seconds(c, hw, true) == plan::seconds(c, *plan::find_hardware("cpu"), true));
  // The table round-trips alone and inside the profile.
  CHECK(plan::collectives_from_json(plan::to_json(t)).points == t.points);
  CHECK(plan::from_json(plan::to_json(p)).collectives->ranks == 2);
  t.ranks = 1;
  CHECK_THROWS_WITH(plan::collectives_from_json(plan::to_json(t)), Contains("collectives.ranks"));
}

TEST_CASE("a profile's checked accuracy round-trips and is what validate and plan quote") {
  plan::MeasuredProfile checked = ideal();
  CHECK_THAT(plan::expected_error(&checked), Contains("not been checked against runs"));
  CHECK_THAT(plan::expected_error(nullptr), Contains("peak x 60% is optimistic"));
  // A CPU job without a profile (issue 44 item 1: the demo's step 3.2x its prediction, without a word)
  CHECK_THAT(plan::expected_error(nullptr, true),
             Contains("no profile: CPU step times at peak x 60%") && Contains("known to be off by up to 23x") &&
                 Contains("ptrain profile --quick --nproc 2"));
  CHECK(plan::expected_error(&checked, true) == plan::expected_error(&checked));
  checked.accuracy = plan::Accuracy{6, 0.0949, 0.1426, "2026-11-26", "one GPU: six jobs"};
  const plan::MeasuredProfile back = plan::from_json(plan::to_json(checked));
  REQUIRE(back.accuracy.has_value());
  CHECK(back.accuracy->jobs == 6);
  CHECK(plan::expected_error(&back) == "median 9%, worst 14% over 6 runs of one GPU: six jobs (2026-11-26)");
  std::string text = plan::to_json(checked);
  CHECK_THROWS_WITH(plan::from_json(text.replace(text.find("0.1426"), 6, "0.0100")), Contains("accuracy"));
}

TEST_CASE("ring attention's hops hide behind (cp-1)/cp of the attention on a device transport, not on Gloo") {
  config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.cp=4", "parallel.cp_comm=ring"}, 4);
  REQUIRE(job.ok());
  plan::HardwareProfile device = *plan::find_hardware("h100-sxm");
  device.measured = std::make_shared<const plan::MeasuredProfile>(ideal());
  plan::HardwareProfile host = device;
  host.host_collectives = true;
  const model::ModelOps ops = model::model_ops(job.spec);
  const plan::StageCompute compute = plan::stage_compute(job.spec, ops, ideal(), 0, 8);
  REQUIRE(compute.forward.attention > 0);
  const pipeline::OpCosts hidden = plan::stage_op_costs(job.spec, device), whole = plan::stage_op_costs(job.spec, host);
  // Whole on Gloo: the forward is its compute plus every hop.
  const double hops_forward = whole.forward[0] - compute.forward.total();
  const double hops_backward = whole.backward[0] - compute.backward.total();
  REQUIRE(hops_forward > 0);
  CHECK(hidden.forward[0] - compute.forward.total() ==
        Approx(std::max(0.0, hops_forward - 0.75 * compute.forward.attention)).margin(1e-12));
  CHECK(hidden.backward[0] - compute.backward.total() ==
        Approx(std::max(0.0, hops_backward - 0.75 * compute.backward.attention)).margin(1e-12));
  CHECK(hidden.forward[0] < whole.forward[0]);
  // allgather's gathers block wherever they run
  job.spec.parallel.cp_comm = config::CpComm::Allgather;
  const pipeline::OpCosts gathered = plan::stage_op_costs(job.spec, device);
  CHECK(gathered.forward[0] == Approx(plan::stage_op_costs(job.spec, host).forward[0]));
}

TEST_CASE("the attention kernels a profile timed round-trip, and a job that runs others is told") {
  using kernels::CudnnAttentionMode;
  plan::MeasuredProfile p = ideal();
  CHECK(plan::attention_mismatch(p, CudnnAttentionMode::Off).empty());  // the profile does not say
  CHECK_FALSE(plan::from_json(plan::to_json(p)).cudnn_attention);
  p.cudnn_attention = CudnnAttentionMode::Fast;
  CHECK(plan::from_json(plan::to_json(p)).cudnn_attention == CudnnAttentionMode::Fast);
  std::string text = plan::to_json(p);
  CHECK_THROWS_WITH(plan::from_json(text.replace(text.find("\"fast\""), 6, "\"fastest\"")),
                    Contains("cudnn_attention") && Contains("auto, fast, deterministic or off"));
  CHECK(plan::attention_mismatch(p, CudnnAttentionMode::Fast).empty());
  CHECK(plan::attention_mismatch(p, CudnnAttentionMode::Auto).empty());  // auto is fast at most
  CHECK_THAT(plan::attention_mismatch(p, CudnnAttentionMode::Off),
             Contains("timed cuDNN's attention (PTRAIN_CUDNN_ATTENTION=fast)") &&
                 Contains("run ptrain's own attention kernels (off)"));
  CHECK_THAT(plan::attention_mismatch(p, CudnnAttentionMode::Deterministic), Contains("deterministic backward"));
  p.cudnn_attention = CudnnAttentionMode::Off;
  CHECK(plan::attention_mismatch(p, CudnnAttentionMode::Off).empty());
  CHECK_THAT(plan::attention_mismatch(p, CudnnAttentionMode::Auto), Contains("timed ptrain's own attention kernels"));
}
