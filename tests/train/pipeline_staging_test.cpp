// Pipeline parallelism on a device backend whose Comm cannot take device memory (Gloo, for ranks
// that share a GPU): the stages' messages go through host copies, and the run reproduces the
// CPU's loss curve exactly. The device is the CPU ops under a device's name, so the arithmetic is
// the same and only the staging differs; two real ranks (threads, Gloo over TCP).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/pretend_device_ops.h"
#include "tests/trained_rows.h"

namespace {

using namespace ptrain;

constexpr const char* kJob = R"(
name: pipeline-staging
backend: cpu
model: {arch: gpt2, layers: 4, hidden: 32, heads: 4, ffn_hidden: 64, vocab: 97, seq_len: 16}
train: {steps: 4, global_batch: 8, micro_batch: 2, precision: fp32, seed: 3}
optimizer: {lr: 1.0e-2, warmup_steps: 1}
data: {format: synthetic}
parallel: {pp: 2}
cluster: {nodes: 1, gpus_per_node: 2, gpu: cpu}
logging: {every: 1}
)";

// Trains the job on two Gloo ranks with `ops`; returns the losses rank 0 logged.
std::vector<double> losses(const kernels::Ops& ops, const std::vector<std::string>& sets) {
  std::vector<double> out;
  for (const nlohmann::json& row : test::trained_rows(kJob, sets, 2, ops))
    if (row.contains("loss")) out.push_back(row["loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("pipeline messages of a device's buffers go through the host and train as on the CPU") {
  const std::vector<std::vector<std::string>> layouts = {
      {"schedule.kind=1f1b"},
      {"schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2", "model.arch=llama", "model.kv_heads=2"},
      {"schedule.kind=zb-h1", "train.precision=bf16", "data.eval_every=2"},
  };
  for (const auto& sets : layouts) {
    INFO(sets.front());
    const std::vector<double> on_cpu = losses(kernels::cpu_ops(), sets);
    const test::PretendDeviceOps device;
    const std::vector<double> staged = losses(device, sets);
    REQUIRE(on_cpu.size() == 4);
    CHECK(staged == on_cpu);
    // Every message (at least 8 a step: 4 microbatches' activations and gradients) copied out of
    // the sender's device and into the receiver's; the rest of a step copies a few scalars out.
    UNSCOPED_INFO("copies out " << device.copies_out << ", in " << device.copies_in);
    CHECK(device.copies_out >= 4 * 8);
    CHECK(device.copies_in >= 4 * 8);
  }
}
