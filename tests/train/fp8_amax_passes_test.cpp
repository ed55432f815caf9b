// Under train.fp8.scaling current, the amaxes a layer's casts need are each taken once, and
// without a pass of their own wherever something already holds them: the norms, the activation and
// its backward write them beside their outputs (ops.h `amax`); the others (the attention output,
// the output gradients of q, k, v, o and the MLP's last linear layer) are taken once and read by
// every cast of the tensor, the weight gradients' too (model::KnownAmaxes). So the abs_max passes
// over a [tokens, hidden] tensor are, per layer and microbatch, the attention output's (once more
// under full recompute, which reruns the forward before the backward, and before the split-off
// weight gradients again) and the output gradients of o, q and the MLP's
// last layer (and of k and v, which have that size without GQA); over a [tokens, ffn] tensor none;
// whether the weight gradients are split off (zb-h1) or not. With a pass in every cast (36fce4a, and
// delayed scaling's first step now) Llama's were 9 per layer over [tokens, hidden] and 5 over
// [tokens, ffn], 12 and 6 with the weight gradients split off; GPT-2's 13 and 3, 16 and 4. The
// device is the CPU ops under a device's name that records the passes (tests/pretend_device_ops.h);
// one rank, one step of one microbatch. And the amaxes are the right ones: every cast's amax is bit
// for bit abs_max of the tensor it casts (on one rank nothing reduces them), over two microbatches a
// step too (a stale amax, another microbatch's or layer's, would differ); and a first step under
// delayed scaling (no history yet: every cast takes its tensor's amax by a pass of its own) gives bit
// for bit the loss and gradient norm current scaling gives. Beside it: every FP8 GEMM of a step sums
// as model/block_linears.h says (the forward's fast, the gradients' promoted), recomputed forwards,
// split-off weight gradients and experts included.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/load_job.h"
#include "tests/pretend_device_ops.h"
#include "tests/trained_rows.h"

namespace {

using namespace ptrain;

// 64 tokens of hidden 32 and ffn 48 (GPT-2's: 128): no weight, nor a k/v tensor, has either size.
constexpr const char* kJob = R"(
name: fp8-amax-passes
backend: cpu
model: {arch: llama, layers: 2, hidden: 32, heads: 4, kv_heads: 2, ffn_hidden: 48, vocab: 97, seq_len: 64}
train: {steps: 1, global_batch: 1, micro_batch: 1, precision: fp8, fp8: {scaling: current}, seed: 3}
optimizer: {lr: 1.0e-2, warmup_steps: 1}
data: {format: synthetic}
cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}
logging: {every: 1}
)";

// Trains the job with `sets` on one rank of `ops`; the first step's metrics row.
nlohmann::json first_step(const kernels::Ops& ops, const std::vector<std::string>& sets) {
  for (const nlohmann::json& row : test::trained_rows(kJob, sets, 1, ops))
    if (row.contains("loss")) return row;
  FAIL("no step was logged");
  return {};
}

}  // namespace

TEST_CASE("fp8 current scaling takes no amax pass over what a layer's norms and activations wrote", "[fp8]") {
  for (const char* arch : {"gpt2", "llama"}) {
    for (const char* recompute : {"none", "selective", "full"}) {
      for (const char* schedule : {"1f1b", "zb-h1"}) {
        INFO(arch << ", recompute " << recompute << ", " << schedule);
        std::vector<std::string> sets{std::string("model.arch=") + arch, std::string("train.recompute=") + recompute,
                                      std::string("schedule.kind=") + schedule};
        if (std::string(arch) == "gpt2") sets.insert(sets.end(), {"model.kv_heads=4", "model.ffn_hidden=128"});
        const config::LoadResult job = test::load_job(kJob, sets, 1);
        REQUIRE(job.ok());
        const test::PretendDeviceOps device;
        const nlohmann::json current = first_step(device, sets);
        const std::int64_t N = 64, C = job.spec.model.hidden, F = job.spec.model.ffn_hidden;
        CHECK(device.abs_max_passes(N * F) == 0);
        const bool full = std::string(recompute) == "full", split = std::string(schedule) == "zb-h1";
        const int forwards = 1 + (full ? 1 + split : 0);
        const int per_layer = forwards + 3 + (std::string(arch) == "gpt2" ? 2 : 0);
        CHECK(device.abs_max_passes(N * C) == per_layer * job.spec.model.layers);
        sets.push_back("train.fp8.scaling=delayed");
        const nlohmann::json delayed = first_step(kernels::cpu_ops(), sets);
        CHECK(current.at("loss").get<double>() == delayed.at("loss").get<double>());
        CHECK(current.at("grad_norm").get<double>() == delayed.at("grad_norm").get<double>());
        test::PretendDeviceOps checked;
        checked.check_cast_amaxes = true;
        sets.back() = "train.fp8.scaling=current";
        sets.insert(sets.end(), {"train.global_batch=2", "train.steps=2"});
        first_step(checked, sets);
        CHECK(checked.casts_checked > 0);
        CHECK(checked.cast_amax_mismatches == 0);
      }
    }
  }
}

TEST_CASE("fp8 GEMMs sum fast in the forward and promoted in the gradients", "[fp8]") {
  for (const char* arch : {"gpt2", "llama", "mixtral"}) {
    for (const char* recompute : {"none", "full"}) {
      for (const char* schedule : {"1f1b", "zb-h1"}) {
        INFO(arch << ", recompute " << recompute << ", " << schedule);
        std::vector<std::string> sets{std::string("model.arch=") + arch, std::string("train.recompute=") + recompute,
                                      std::string("schedule.kind=") + schedule};
        if (std::string(arch) == "gpt2") sets.insert(sets.end(), {"model.kv_heads=4", "model.ffn_hidden=128"});
        if (std::string(arch) == "mixtral") sets.push_back("model.moe.experts=4");
        const test::PretendDeviceOps device;
        first_step(device, sets);
        using kernels::Fp8Sums;
        CHECK(device.fp8_gemms(true, Fp8Sums::Fast) > 0);
        CHECK(device.fp8_gemms(false, Fp8Sums::Promoted) > 0);
        CHECK(device.fp8_gemms(true, Fp8Sums::Promoted) == 0);
        CHECK(device.fp8_gemms(false, Fp8Sums::Fast) == 0);
      }
    }
  }
}
