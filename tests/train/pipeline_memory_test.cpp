// What a pipeline rank's executor allocates for activations and messages (its chunks' arenas, the
// shared workspace, the send buffers) is what `validate` predicts for that rank: plan's activation
// bytes plus the pipeline's share of the communication buffers, from the same
// pipeline::rank_buffers. Only the arena's 64-byte alignment of each view differs.
#include <catch2/catch.hpp>
#include <numeric>

#include "engine/model/param_registry.h"
#include "engine/model/param_store.h"
#include "engine/pipeline/buffers.h"
#include "engine/plan/comm.h"
#include "engine/plan/memory.h"
#include "engine/train/pipeline_stage.h"
#include "kernels/ops.h"
#include "tests/load_job.h"
#include "tests/silent_comm.h"

namespace {

using namespace ptrain;

constexpr const char* kJob = R"(
name: pipeline-memory
backend: cpu
model: {arch: gpt2, layers: 8, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 500, seq_len: 128}
train: {global_batch: 16, micro_batch: 2, precision: fp32}
cluster: {nodes: 1, gpus_per_node: 4, gpu: cpu}
)";

TEST_CASE("a pipeline rank allocates what validate predicts for it") {
  const std::vector<std::vector<std::string>> layouts = {
      {"parallel.pp=2"},
      {"parallel.pp=4", "schedule.kind=gpipe", "train.recompute=full"},
      {"parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2", "model.arch=llama"},
      {"parallel.pp=4", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2",
       "train.recompute=selective"},
      {"parallel.pp=2", "schedule.layers_per_stage=[3, 5]", "train.precision=bf16", "model.arch=llama"},
      {"parallel.pp=4", "schedule.kind=zb-h1", "train.recompute=selective", "model.arch=llama"},
      {"parallel.pp=2", "schedule.kind=zb-h1"},
  };
  for (const auto& sets : layouts) {
    const config::LoadResult job = test::load_job(kJob, sets, std::stoi(sets[0].substr(12)));
    const config::JobSpec& spec = job.spec;
    const pipeline::Schedule schedule = pipeline::build(
        spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages, spec.train.microbatches);
    const std::vector<pipeline::RankBuffers> held = pipeline::rank_buffers(schedule);
    for (int r = 0; r < spec.parallel.pp; ++r) {
      INFO(sets.back() << " (" << sets.size() << " settings), pp rank " << r);
      test::SilentComm comm(r, spec.parallel.pp);
      std::vector<int> ranks(static_cast<std::size_t>(spec.parallel.pp));
      std::iota(ranks.begin(), ranks.end(), 0);
      const dist::Group& pp = comm.new_group("pp", ranks);
      model::ParamStore store(model::build_registry(spec.model), model::shard_coords(spec, r, 0, 0));
      const train::PipelineStage stage(spec, store, kernels::cpu_ops(), comm, &pp, spec.train.microbatches);
      const auto& mine = held[static_cast<std::size_t>(r)];
      const double sends = mine.send_buffers * plan::bytes_sent(plan::pipeline_message(spec));
      const double predicted = plan::activation_bytes(spec, r, mine) + sends;
      const double allocated = static_cast<double>(stage.activation_bytes());
      CHECK(allocated >= predicted);
      // At most 400 views aligned: less than one message (256 tokens x 64 x 2 or 4 bytes).
      CHECK(allocated - predicted < 64.0 * 400);
      CHECK(64.0 * 400 < plan::bytes_sent(plan::pipeline_message(spec)));
      CHECK(sends > 0);
    }
  }
}

}  // namespace
