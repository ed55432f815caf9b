// What ZeRO allocates on a rank equals what `validate` predicts for it (plan::rank_memory), stage
// by stage: parameters, gradients, optimizer state and the gather/reduction windows, to the byte:
// validate counts the flat layout's padding (plan/rank_params.h) as the ParamStore lays it out.
#include <catch2/catch.hpp>

#include "engine/comm/comm.h"
#include "engine/model/param_registry.h"
#include "engine/plan/memory.h"
#include "engine/plan/rank_params.h"
#include "engine/zero/data_parallel.h"
#include "kernels/ops.h"
#include "tests/load_job.h"
#include "tests/silent_comm.h"

namespace {

using namespace ptrain;

config::LoadResult job(const char* arch, int zero, const char* precision, const char* grad_reduce) {
  return test::load_job(
      R"(
name: zero-memory
backend: cpu
model: {arch: gpt2, layers: 3, hidden: 64, heads: 4, ffn_hidden: 256, vocab: 1000, seq_len: 32}
train: {global_batch: 8, micro_batch: 2, precision: fp32}
cluster: {nodes: 1, gpus_per_node: 2, gpu: cpu}
)",
      {std::string("model.arch=") + arch, "parallel.zero=" + std::to_string(zero),
       std::string("train.precision=") + precision, std::string("train.grad_reduce=") + grad_reduce},
      2);
}

}  // namespace

TEST_CASE("ZeRO allocates what validate predicts, stage by stage") {
  struct Precision {
    const char *precision, *grad_reduce;
    int param_bytes;  // of the weights the model computes with
  };
  for (const Precision p : {Precision{"fp32", "fp32", 4}, Precision{"bf16", "fp32", 2}, Precision{"bf16", "bf16", 2}}) {
    for (const char* arch : {"gpt2", "llama"}) {
      for (int zero = 0; zero <= 3; ++zero) {
        INFO(arch << " zero " << zero << " precision " << p.precision << " grad_reduce " << p.grad_reduce);
        const config::LoadResult loaded = job(arch, zero, p.precision, p.grad_reduce);
        const config::JobSpec& spec = loaded.spec;
        REQUIRE(spec.parallel.dp == 2);
        const model::ShardCoords coords = model::shard_coords(spec, 0, 0, 0);
        std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
        const pipeline::ScheduleModel schedule(spec.schedule.kind, 1, 1, spec.train.microbatches);
        const plan::RankParams counted =
            plan::count_rank_params(spec, schedule, model::local_params(registry, coords), 0);
        const plan::MemoryBreakdown predicted = plan::rank_memory(plan::ActivationCounts(spec), counted, 0, {{1}, {}, 0});

        model::ParamStore store(std::move(registry), coords, parallel::zero_store_options(spec, 2, kernels::cpu_ops()));
        test::SilentComm comm(0, 2);
        const dist::Group& dp = comm.new_group("dp", {0, 1});
        const parallel::DataParallel engine(spec, store, kernels::cpu_ops(), comm, dp);
        const parallel::ZeroBytes allocated = engine.allocated_bytes();

        CHECK(allocated.params == Approx(predicted.params).epsilon(1e-9));
        CHECK(allocated.grads == Approx(predicted.grads).epsilon(1e-9));
        CHECK(allocated.optimizer == Approx(predicted.optimizer).epsilon(1e-9));
        // One data-parallel axis on CPU: the only communication buffers are ZeRO's windows.
        CHECK(allocated.windows == Approx(predicted.comm_buffers).epsilon(1e-9).margin(1.0));
        if (zero < 2 && std::string(p.grad_reduce) == "fp32") CHECK(allocated.windows == 0);
        // Sharding halves what it shards. Mixed precision keeps fp32 masters with the moments.
        const double n = static_cast<double>(store.numel());
        const bool mixed = p.param_bytes == 2;
        const double optimizer = n * (mixed ? 12 : 8);
        CHECK(allocated.optimizer == Approx(zero >= 1 ? optimizer / 2 : optimizer).epsilon(1e-9));
        CHECK(allocated.grads == Approx(zero >= 2 ? 2 * n : 4 * n).epsilon(1e-9));
        const double params = zero < 3 ? n * p.param_bytes : mixed ? 0.0 : 2 * n;
        CHECK(allocated.params == Approx(params).epsilon(1e-9).margin(0.5));
      }
    }
  }
}

TEST_CASE("offloaded, the optimizer's state is the host's at every ZeRO stage, as validate predicts") {
  for (const char* precision : {"fp32", "bf16"}) {
    for (int zero = 0; zero <= 3; ++zero) {
      INFO("zero " << zero << " precision " << precision);
      const config::LoadResult loaded = test::load_job(
          R"(
name: zero-offload-memory
backend: cpu
model: {arch: llama, layers: 3, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 256, vocab: 1000, seq_len: 32}
train: {global_batch: 8, micro_batch: 2, precision: fp32}
parallel: {offload: optimizer}
cluster: {nodes: 1, gpus_per_node: 2, gpu: cpu}
)",
          {"parallel.zero=" + std::to_string(zero), std::string("train.precision=") + precision}, 2);
      REQUIRE(loaded.ok());
      const config::JobSpec& spec = loaded.spec;
      const model::ShardCoords coords = model::shard_coords(spec, 0, 0, 0);
      std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
      const pipeline::ScheduleModel schedule(spec.schedule.kind, 1, 1, spec.train.microbatches);
      const plan::RankParams counted =
          plan::count_rank_params(spec, schedule, model::local_params(registry, coords), 0);
      const plan::MemoryBreakdown predicted = plan::rank_memory(plan::ActivationCounts(spec), counted, 0, {{1}, {}, 0});

      model::ParamStore store(std::move(registry), coords, parallel::zero_store_options(spec, 2, kernels::cpu_ops()));
      test::SilentComm comm(0, 2);
      const parallel::DataParallel engine(spec, store, kernels::cpu_ops(), comm, comm.new_group("dp", {0, 1}));
      const parallel::ZeroBytes allocated = engine.allocated_bytes();
      CHECK(allocated.optimizer == 0);
      CHECK(predicted.optimizer == 0);
      CHECK(allocated.host == Approx(predicted.host).epsilon(1e-9));
      CHECK(allocated.params == Approx(predicted.params).epsilon(1e-9));
      CHECK(allocated.grads == Approx(predicted.grads).epsilon(1e-9));
      // fp32 master, m, v and the gradients' copy for every owned element, and their bf16 copy.
      const double owned = static_cast<double>(store.numel()) / (zero >= 1 ? 2 : 1);
      CHECK(allocated.host == Approx(owned * (std::string(precision) == "bf16" ? 18 : 16)).epsilon(1e-9));
      // The device keeps the weights (at stage 3 the owned chunks only) and the gradients.
      CHECK(allocated.params == Approx((zero == 3 ? owned : static_cast<double>(store.numel())) *
                                       (std::string(precision) == "bf16" ? 2 : 4)).epsilon(1e-9));
    }
  }
}
