// What a pipeline rank's executor allocates for activations and messages (its chunks' arenas, the
// shared workspace, the slots its chunks share under a cap, the send buffers) is what `validate`
// predicts for that rank, with and without
// tensor, context and expert parallelism and with MoE layers: plan's activation
// bytes plus the pipeline's share of the communication buffers, from the same
// pipeline::rank_buffers. Only the arena's 64-byte alignment of each view differs.
#include <catch2/catch.hpp>
#include <numeric>

#include "engine/model/param_registry.h"
#include "engine/model/param_store.h"
#include "engine/parallel/context_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/pipeline/buffers.h"
#include "engine/plan/traffic.h"
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
model: {arch: gpt2, layers: 8, hidden: 64, heads: 4, ffn_hidden: 128, vocab: 500, seq_len: 128}
train: {global_batch: 16, micro_batch: 2, precision: fp32}
cluster: {nodes: 1, gpus_per_node: 4, gpu: cpu}
)";

TEST_CASE("a pipeline rank allocates what validate predicts for it") {
  const std::vector<std::vector<std::string>> layouts = {
      {"parallel.pp=2"},
      {"parallel.pp=4", "schedule.kind=gpipe", "train.recompute=full"},
      {"parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2", "model.arch=llama",
       "model.kv_heads=2"},
      {"parallel.pp=4", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2",
       "train.recompute=selective"},
      {"parallel.pp=2", "schedule.layers_per_stage=[3, 5]", "train.precision=bf16", "model.arch=llama",
       "model.kv_heads=2"},
      {"parallel.pp=4", "schedule.kind=zb-h1", "train.recompute=selective", "model.arch=llama",
       "model.kv_heads=2"},
      {"parallel.pp=2", "schedule.kind=zb-h1"},
      // Tensor parallelism: this rank's heads, MLP slice and vocabulary shard, the loss's shard stats.
      {"parallel.pp=2", "parallel.tp=2"},
      {"parallel.pp=2", "parallel.tp=2", "schedule.kind=zb-h1", "model.arch=llama", "model.kv_heads=2"},
      {"parallel.pp=1", "parallel.tp=4", "train.recompute=full", "model.arch=llama", "model.kv_heads=2"},
      // Sequence parallelism: the residual stream is this rank's tokens, gathered around the GEMMs.
      {"parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true", "schedule.kind=zb-h1"},
      {"parallel.pp=2", "parallel.tp=4", "parallel.sequence_parallel=true", "train.recompute=selective",
       "model.arch=llama", "model.kv_heads=2", "schedule.kind=interleaved-1f1b", "train.micro_batch=4",
       "schedule.virtual_stages=2"},
      // A cap on the microbatches in flight: the chunks of a rank share their slots, each as large as
      // the largest chunk's (uneven chunks: 1 + 3 layers on rank 0, 2 + 2 on rank 1).
      {"parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2", "schedule.max_in_flight=2",
       "schedule.layers_per_stage=[1, 2, 3, 2]", "model.arch=llama", "model.kv_heads=2"},
      {"parallel.pp=4", "schedule.max_in_flight=2", "train.precision=bf16", "train.recompute=selective"},
      {"parallel.pp=2", "parallel.cp=2", "model.arch=mixtral", "model.kv_heads=2", "model.moe.experts=4",
       "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2", "schedule.max_in_flight=2"},
      // The V schedules: two chunks a rank, the last rank's turn copied into its chunk 1's input slot.
      {"parallel.pp=2", "schedule.kind=zbv", "model.arch=llama", "model.kv_heads=2"},
      {"parallel.pp=4", "schedule.kind=dualpipev", "model.arch=llama", "model.kv_heads=2", "train.micro_batch=1",
       "train.recompute=full"},
      // Context parallelism: this rank's chunks of the sequence; the whole sequence's k and v in backward.
      {"parallel.pp=2", "parallel.cp=2"},
      {"parallel.pp=2", "parallel.cp=2", "parallel.tp=2", "parallel.sequence_parallel=true",
       "train.recompute=full", "model.arch=llama", "model.kv_heads=2", "schedule.kind=zb-h1",
       "train.micro_batch=4"},
      {"parallel.pp=1", "parallel.cp=4", "train.precision=bf16", "model.arch=llama", "model.kv_heads=2",
       "train.micro_batch=8"},
      // Ring attention: two ranks' k and v and their gradients, one block's partial results.
      {"parallel.pp=2", "parallel.cp=4", "parallel.cp_comm=ring", "model.arch=llama", "model.kv_heads=2",
       "train.precision=bf16", "train.micro_batch=8"},
      {"parallel.pp=2", "parallel.cp=2", "parallel.cp_comm=ring", "parallel.tp=2",
       "parallel.sequence_parallel=true", "train.recompute=full", "schedule.kind=zb-h1", "train.micro_batch=4"},
      // All-to-all attention: q, k, v and the output in head layout (kv heads copied at cp 4), staging.
      {"parallel.pp=2", "parallel.cp=2", "parallel.cp_comm=a2a", "model.arch=llama", "model.kv_heads=2"},
      {"parallel.pp=1", "parallel.cp=4", "parallel.cp_comm=a2a", "model.arch=llama", "model.kv_heads=2",
       "train.precision=bf16", "train.recompute=full", "train.micro_batch=8"},
      // MoE layers: the router's routing tensors and the experts' capacity-sized slot buffers.
      {"parallel.pp=2", "model.arch=mixtral", "model.kv_heads=2", "model.moe.experts=4",
       "schedule.kind=zb-h1"},
      {"parallel.pp=2", "model.arch=mixtral", "model.kv_heads=2", "model.moe.experts=8", "model.moe.top_k=1",
       "train.precision=bf16", "train.recompute=selective"},
      {"parallel.pp=4", "model.arch=mixtral", "model.kv_heads=2", "model.moe.capacity_factor=2.0",
       "train.recompute=full", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2"},
      // MoE under context parallelism: the whole sequences' routing tensors, the gathered logits.
      {"parallel.pp=2", "parallel.cp=2", "model.arch=mixtral", "model.kv_heads=2", "model.moe.experts=4",
       "train.micro_batch=4", "schedule.kind=zb-h1"},
      {"parallel.pp=1", "parallel.cp=4", "parallel.cp_comm=ring", "model.arch=mixtral", "model.kv_heads=2",
       "model.moe.experts=4", "train.micro_batch=8", "train.precision=bf16", "train.recompute=full"},
      // Expert parallelism: the local experts' slots from every ep rank, the all-to-all's buffer.
      {"parallel.pp=2", "parallel.dp=2", "parallel.ep=2", "model.arch=mixtral", "model.kv_heads=2",
       "model.moe.experts=4", "schedule.kind=zb-h1"},
      {"parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true", "parallel.ep=2",
       "model.arch=mixtral", "model.kv_heads=2", "model.moe.experts=4", "schedule.kind=zb-h1",
       "train.recompute=full"},
      {"parallel.pp=1", "parallel.dp=4", "parallel.ep=4", "model.arch=mixtral", "model.kv_heads=2",
       "model.moe.experts=8", "train.precision=bf16", "train.recompute=selective", "train.micro_batch=2"},
  };
  for (const auto& sets : layouts) {
    auto degree = [&](const std::string& key) {
      for (const std::string& s : sets)
        if (s.starts_with(key + "=")) return std::stoi(s.substr(key.size() + 1));
      return 1;
    };
    const int pp_ranks = degree("parallel.pp"), tp_ranks = degree("parallel.tp"),
              cp_ranks = degree("parallel.cp"), dp_ranks = degree("parallel.dp"),
              ep_ranks = degree("parallel.ep");
    const int per_stage = tp_ranks * cp_ranks * dp_ranks;  // the default order: tp fastest, then cp, ..., pp
    const config::LoadResult job = test::load_job(kJob, sets, pp_ranks * per_stage);
    const config::JobSpec& spec = job.spec;
    const pipeline::Schedule schedule = pipeline::build(spec, spec.train.microbatches);
    const std::vector<pipeline::RankBuffers> held = pipeline::rank_buffers(schedule);
    for (int r = 0; r < spec.parallel.pp; ++r) {
      INFO(sets.back() << " (" << sets.size() << " settings), pp rank " << r);
      // pp rank r with tp and cp rank 0: world rank r * tp * cp.
      test::SilentComm comm(r * per_stage, pp_ranks * per_stage);
      std::vector<int> pp_group(static_cast<std::size_t>(pp_ranks)),
          tp_group(static_cast<std::size_t>(tp_ranks)), cp_group(static_cast<std::size_t>(cp_ranks));
      for (int i = 0; i < pp_ranks; ++i) pp_group[static_cast<std::size_t>(i)] = i * per_stage;
      std::iota(tp_group.begin(), tp_group.end(), r * per_stage);
      for (int i = 0; i < cp_ranks; ++i) cp_group[static_cast<std::size_t>(i)] = r * per_stage + i * tp_ranks;
      const dist::Group& pp = comm.new_group("pp", pp_group);
      parallel::TensorParallel tp(comm, kernels::cpu_ops(), comm.new_group("tp", tp_group), nullptr,
                                  spec.parallel.sequence_parallel);
      parallel::ContextParallel cp(comm, kernels::cpu_ops(), comm.new_group("cp", cp_group),
                                   spec.train.micro_batch, spec.model.seq_len, spec.parallel.cp_comm,
                                   model::ring_message_bytes(spec));
      std::vector<int> ep_group(static_cast<std::size_t>(ep_ranks));  // expert grid: ep next after tp, cp
      std::iota(ep_group.begin(), ep_group.end(), r * per_stage);
      parallel::ExpertParallel ep(comm, kernels::cpu_ops(), comm.new_group("ep", ep_group));
      model::ParamStore store(model::build_registry(spec.model), model::shard_coords(spec, r, 0, 0));
      const train::PipelineStage stage(spec, store, kernels::cpu_ops(), comm, &pp,
                                       tp_ranks > 1 ? &tp : nullptr, cp_ranks > 1 ? &cp : nullptr,
                                       ep_ranks > 1 ? &ep : nullptr, spec.train.microbatches);
      const auto& mine = held[static_cast<std::size_t>(r)];
      if (spec.schedule.max_in_flight > 0) CHECK(mine.shared_slots > 0);  // the cap binds: slots shared
      const double sends = mine.send_buffers * plan::bytes_sent(plan::pipeline_message(spec));
      const double predicted = plan::ActivationCounts(spec).rank(r, mine) + sends;
      const double allocated = static_cast<double>(stage.activation_bytes());
      CHECK(allocated >= predicted);
      // At most 400 views aligned: less than one message (256 tokens x 64 x 2 or 4 bytes).
      CHECK(allocated - predicted < 64.0 * 400);
      CHECK(64.0 * 400 < plan::bytes_sent(plan::pipeline_message(spec)));
      CHECK((sends > 0) == (spec.parallel.pp > 1));
    }
  }
}

}  // namespace
