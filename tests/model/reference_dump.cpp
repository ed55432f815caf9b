// ptrain_reference_dump: what ptrain computes for a job, written for tests/model/torch_reference.py.
//   ptrain_reference_dump <job.yaml> <out_dir> [--set key=value ...]
// Writes <out_dir>/hf (the initial weights, HF export), <out_dir>/dump.safetensors and
// <out_dir>/dump.safetensors.json:
//   batch.tokens / batch.targets [B, T]   one microbatch (one target ignored: -1)
//   batch.logits [B*T, Vp], batch.loss [1] (mean over counted tokens)
//   grad.<name>                           dLoss/dparam for that batch (ptrain layout)
//   train.tokens / train.targets [steps, microbatches, B, T], train.lrs [steps], train.losses [steps]
//                                         a short run of the real Trainer from the same weights
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/ckpt/hf.h"
#include "engine/ckpt/safetensors.h"
#include "engine/comm/comm.h"
#include "engine/config/loader.h"
#include "engine/data/datasets.h"
#include "engine/model/param_store.h"
#include "engine/model/transformer.h"
#include "engine/optim/lr_schedule.h"
#include "engine/runtime/philox.h"
#include "engine/train/trainer.h"
#include "kernels/ops.h"

using namespace ptrain;

namespace {

std::vector<std::int32_t> random_tokens(std::uint64_t seed, std::size_t n, int vocab) {
  const runtime::PhiloxKey key = runtime::stream_key(seed, 0x70ce);
  std::vector<std::int32_t> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::int32_t>(runtime::uniform_at(key, i) * static_cast<float>(vocab)) % vocab;
  return out;
}

std::vector<double> metric_losses(const std::string& jsonl) {
  std::vector<double> losses;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  return losses;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <job.yaml> <out_dir> [--set key=value ...]\n", argv[0]);
    return 2;
  }
  const std::string out_dir = argv[2];
  config::LoadOptions opts;
  opts.world = 1;
  for (int i = 3; i + 1 < argc; i += 2) opts.overrides.push_back(argv[i + 1]);
  std::filesystem::create_directories(out_dir);
  const std::string metrics = out_dir + "/metrics.jsonl";
  std::filesystem::remove(metrics);
  opts.overrides.push_back("logging.metrics=" + metrics);
  const config::LoadResult job = config::load_file(argv[1], opts);
  for (const auto& d : job.diags.errors) std::fprintf(stderr, "error: %s\n", d.format().c_str());
  if (!job.ok()) return 2;
  const config::JobSpec& spec = job.spec;
  const kernels::Ops& ops = kernels::cpu_ops();

  model::ParamStore store(model::build_registry(spec.model), model::shard_coords(spec, 0, 0, 0));
  store.initialize(spec.train.seed, spec.model.layers);
  ckpt::export_hf(store, spec.model, out_dir + "/hf");

  // One microbatch: logits, loss, gradients.
  model::Transformer transformer(spec, store, ops);
  const auto& d = transformer.dims();
  std::vector<std::int32_t> tokens = random_tokens(spec.train.seed, static_cast<std::size_t>(d.N), d.V);
  std::vector<std::int32_t> targets = random_tokens(spec.train.seed + 1, static_cast<std::size_t>(d.N), d.V);
  targets[static_cast<std::size_t>(d.N) / 2] = -1;
  float loss_sum = 0;  // the CPU backend's memory is the host's
  const std::int64_t counted =
      transformer.evaluate(0, tokens.data(), targets.data(), {&loss_sum, kernels::DType::F32});
  const std::vector<float> logits(transformer.logits(0),
                                  transformer.logits(0) + static_cast<std::size_t>(d.N) * d.Vp);
  store.zero_grads();
  float train_loss_sum = 0;
  transformer.forward(0, tokens.data(), targets.data(), 1.0f / static_cast<float>(counted),
                      {&train_loss_sum, kernels::DType::F32});
  transformer.backward(0);
  const float loss = static_cast<float>(static_cast<double>(loss_sum) / static_cast<double>(counted));

  ckpt::SafetensorsWriter dump;
  dump.add("batch.tokens", ckpt::StDtype::I32, {d.B, d.T}, tokens.data(), tokens.size() * 4);
  dump.add("batch.targets", ckpt::StDtype::I32, {d.B, d.T}, targets.data(), targets.size() * 4);
  dump.add_f32("batch.logits", {d.N, d.Vp}, logits.data());
  dump.add_f32("batch.loss", {1}, &loss);
  for (const model::ParamSlot& s : store.slots())
    dump.add_f32("grad." + s.local.info->name, s.local.local_shape, store.grads() + s.offset);

  // The real trainer from the same initial weights; the data it read, its lr and losses.
  train::Trainer(spec, ops, *dist::make_solo_comm()).run();
  const std::vector<double> losses64 = metric_losses(metrics);
  const auto source = data::open_train_source(spec);
  const data::BatchLoader loader = data::make_train_loader(spec, *source, 0);
  const std::int64_t steps = spec.train.steps;
  const int micro = loader.microbatches();
  std::vector<std::int32_t> train_tokens(static_cast<std::size_t>(steps * micro * d.N)),
      train_targets(train_tokens.size());
  std::vector<float> lrs, losses;
  for (std::int64_t step = 0; step < steps; ++step) {
    for (int mb = 0; mb < micro; ++mb) {
      const std::size_t at = static_cast<std::size_t>((step * micro + mb) * d.N);
      loader.load_microbatch(step, mb, train_tokens.data() + at, train_targets.data() + at);
    }
    lrs.push_back(static_cast<float>(optim::learning_rate(spec.optimizer, steps, step)));
    losses.push_back(static_cast<float>(losses64.at(static_cast<std::size_t>(step))));
  }
  dump.add("train.tokens", ckpt::StDtype::I32, {steps, micro, d.B, d.T}, train_tokens.data(),
           train_tokens.size() * 4);
  dump.add("train.targets", ckpt::StDtype::I32, {steps, micro, d.B, d.T}, train_targets.data(),
           train_targets.size() * 4);
  dump.add_f32("train.lrs", {steps}, lrs.data());
  dump.add_f32("train.losses", {steps}, losses.data());
  dump.write(out_dir + "/dump.safetensors");

  nlohmann::json meta = {{"steps", steps},
                         {"microbatches", micro},
                         {"global_batch", spec.train.global_batch},
                         {"grad_clip", spec.train.grad_clip},
                         {"optimizer",
                          {{"lr", spec.optimizer.lr},
                           {"betas", {spec.optimizer.betas[0], spec.optimizer.betas[1]}},
                           {"eps", spec.optimizer.eps},
                           {"weight_decay", spec.optimizer.weight_decay}}}};
  if (spec.model.moe) meta["capacity_factor"] = spec.model.moe->capacity_factor;
  std::ofstream(out_dir + "/dump.safetensors.json") << meta.dump(2);
  std::printf("wrote %s (loss %.6f over %lld tokens)\n", (out_dir + "/dump.safetensors").c_str(), loss,
              static_cast<long long>(counted));
  return 0;
}
