// Properties of the executable model that need no reference implementation: recompute policies and
// split weight gradients change memory and timing, never results; initialisation is
// layout-independent and deterministic.
#include "engine/model/transformer.h"
#include "engine/plan/memory.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/config/loader.h"
#include "engine/model/param_store.h"
#include "tests/param_indices.h"
#include "engine/model/layer_description.h"

using namespace ptrain;

namespace {

config::JobSpec load(const std::string& file, std::vector<std::string> overrides, int world = 1) {
  config::LoadOptions opts;
  opts.world = world;
  opts.overrides = std::move(overrides);
  const auto job = config::load_file(std::string(PTRAIN_TEST_DIR) + "/" + file, opts);
  REQUIRE(job.ok());
  return job.spec;
}

struct Result {
  std::vector<float> grads;
  double loss;
  std::int64_t arena_bytes;
};

Result run_once(const config::JobSpec& spec, bool split_weight_grad = false) {
  model::ParamStore store(model::build_registry(spec.model), model::shard_coords(spec, 0, 0, 0));
  store.initialize(spec.train.seed, spec.model.layers);
  model::ChunkOptions chunk;
  chunk.split_weight_grad = split_weight_grad;
  model::Transformer t(spec, store, kernels::cpu_ops(), chunk);
  const int n = t.dims().N;
  std::vector<std::int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = (i * 31 + 7) % spec.model.vocab;
    targets[static_cast<size_t>(i)] = (i * 17 + 3) % spec.model.vocab;
  }
  float loss_sum = 0;  // the CPU backend's memory is the host's
  t.forward(0, tokens.data(), targets.data(), 1.0f / static_cast<float>(n), {&loss_sum, kernels::DType::F32});
  t.backward(0);
  if (split_weight_grad) {
    // backward wrote only the norms' and the embedding's gradients: the linear layers' are still 0.
    const model::ParamSlot& q =
        store.slot(spec.model.arch == config::Arch::Gpt2 ? "h.0.attn.c_attn.weight"
                                                         : "model.layers.0.self_attn.q_proj.weight");
    CHECK(std::all_of(store.grads() + q.offset, store.grads() + q.offset + q.numel,
                      [](float g) { return g == 0; }));
    t.weight_grad(0);
  }
  return {std::vector<float>(store.grads(), store.grads() + store.numel()), loss_sum / static_cast<double>(n),
          t.activation_bytes()};
}

}  // namespace

TEST_CASE("recompute policies give bitwise identical gradients and use less memory") {
  for (const char* file : {"tiny-gpt2.yaml", "tiny-llama.yaml"}) {
    INFO(file);
    const Result none = run_once(load(file, {"train.recompute=none"}));
    const Result selective = run_once(load(file, {"train.recompute=selective"}));
    const Result full = run_once(load(file, {"train.recompute=full"}));
    CHECK(none.loss == selective.loss);
    CHECK(none.loss == full.loss);
    CHECK(std::memcmp(none.grads.data(), selective.grads.data(), none.grads.size() * 4) == 0);
    CHECK(std::memcmp(none.grads.data(), full.grads.data(), none.grads.size() * 4) == 0);
    CHECK(selective.arena_bytes < none.arena_bytes);
    CHECK(full.arena_bytes < selective.arena_bytes);
  }
}

TEST_CASE("split weight gradients (backward, then weight_grad) are bitwise the fused backward's") {
  for (const char* file : {"tiny-gpt2.yaml", "tiny-llama.yaml"}) {
    for (const char* mode : {"none", "selective", "full"}) {
      INFO(file << " recompute " << mode);
      const config::JobSpec spec = load(file, {std::string("train.recompute=") + mode});
      const Result fused = run_once(spec);
      const Result split = run_once(spec, true);
      CHECK(std::memcmp(fused.grads.data(), split.grads.data(), fused.grads.size() * 4) == 0);
      // What the backward keeps for W, which validate counts per layer.
      const double kept = static_cast<double>(split.arena_bytes - fused.arena_bytes);
      const double predicted = spec.model.layers * model::total_bytes(model::layer_weight_grad_inputs(spec));
      CHECK(kept >= predicted);
      CHECK(kept - predicted < 64.0 * 8 * spec.model.layers);  // alignment of each view
    }
  }
}

TEST_CASE("initialisation is deterministic and follows the documented scheme") {
  const config::JobSpec spec = load("tiny-gpt2.yaml", {});
  model::ParamStore a(model::build_registry(spec.model), model::shard_coords(spec, 0, 0, 0));
  model::ParamStore b(model::build_registry(spec.model), model::shard_coords(spec, 0, 0, 0));
  a.initialize(7, spec.model.layers);
  b.initialize(7, spec.model.layers);
  CHECK(std::memcmp(a.params(), b.params(), static_cast<size_t>(a.numel()) * 4) == 0);
  b.initialize(8, spec.model.layers);
  CHECK(std::memcmp(a.params(), b.params(), static_cast<size_t>(a.numel()) * 4) != 0);
  CHECK(a.param("h.0.ln_1.weight").as<float>()[0] == 1.0f);
  CHECK(a.param("h.0.ln_1.bias").as<float>()[3] == 0.0f);
  // N(0, 0.02) weights: the sample standard deviation of c_fc is close to 0.02.
  const auto& slot = a.slot("h.0.mlp.c_fc.weight");
  double sum_sq = 0;
  for (std::int64_t i = 0; i < slot.numel; ++i)
    sum_sq += a.params()[slot.offset + i] * a.params()[slot.offset + i];
  CHECK(std::sqrt(sum_sq / static_cast<double>(slot.numel)) == Approx(0.02).epsilon(0.1));
}

TEST_CASE("a tp slice holds exactly the global elements of the whole tensor") {
  const config::JobSpec spec = load("tiny-llama.yaml", {"parallel.tp=2"}, 2);  // vocab 97 padded to 98
  const auto registry = model::build_registry(spec.model);
  for (const auto& info : registry) {
    std::vector<std::int64_t> all;
    for (int r = 0; r < 2; ++r) {
      const auto idx = test::global_indices(info, r, 2);
      all.insert(all.end(), idx.begin(), idx.end());
    }
    std::sort(all.begin(), all.end());
    if (info.tp_dim >= 0) {
      REQUIRE(static_cast<std::int64_t>(all.size()) == info.numel());
      for (std::int64_t i = 0; i < info.numel(); ++i) REQUIRE(all[static_cast<size_t>(i)] == i);
    }
  }
}

TEST_CASE("the whole activation arena is what validate predicts for one microbatch in flight") {
  // Every buffer the arena hands out is one tensor of validate's lists (layers, embedding, head,
  // backward workspace); only the 64-byte alignment of each view differs.
  for (const char* file : {"tiny-gpt2.yaml", "tiny-llama.yaml"}) {
    for (const char* mode : {"none", "selective", "full"}) {
      INFO(file << " recompute " << mode);
      const config::JobSpec spec = load(file, {std::string("train.recompute=") + mode});
      model::ParamStore store(model::build_registry(spec.model), model::shard_coords(spec, 0, 0, 0));
      const model::Transformer t(spec, store, kernels::cpu_ops());
      const double predicted = plan::ActivationCounts(spec).rank(0, {{1}, {}, 0});
      const double allocated = static_cast<double>(t.activation_bytes());
      CHECK(allocated >= predicted);
      CHECK(allocated - predicted < 64.0 * 200);  // at most 200 views' alignment
    }
  }
}
