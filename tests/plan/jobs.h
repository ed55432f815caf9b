// Jobs for the plan tests, loaded through config::load_string like `ptrain validate` loads them.
#pragma once

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/loader.h"
#include "tests/load_job.h"

namespace ptrain::test {

// As `ptrain plan` reads a job: overrides applied, nothing derived, the world set to the GPUs.
inline config::LoadResult read_for_plan(const std::string& yaml, int gpus, std::vector<std::string> overrides = {}) {
  config::LoadOptions options;
  options.overrides = std::move(overrides);
  options.derive = false;
  config::LoadResult job = config::load_string(yaml, "test.yaml", options);
  for (const config::Diagnostic& d : job.diags.errors) UNSCOPED_INFO(d.format());
  REQUIRE(job.ok());
  job.spec.world = gpus;
  return job;
}

// A small Llama: 8 layers, h 256, 8 heads (4 kv), f 512, V 1000, s 128; one 8-GPU H100 node.
inline const char* const kSmallLlama = R"(
name: small
model: {arch: llama, layers: 8, hidden: 256, heads: 8, kv_heads: 4, ffn_hidden: 512, vocab: 1000, seq_len: 128}
parallel: {tp: 1, pp: 1}
schedule: {kind: 1f1b}
train: {global_batch: 16, micro_batch: 1, precision: bf16, recompute: none}
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}
)";

inline const char* const kLlama3_70b = R"(
name: llama3-70b
model: {arch: llama, layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn_hidden: 28672, vocab: 128256,
        seq_len: 8192}
parallel: {tp: 1, pp: 1, zero: 0}
schedule: {kind: 1f1b}
train: {global_batch: 512, micro_batch: 1, precision: bf16, recompute: none}
cluster: {nodes: 8, gpus_per_node: 8, gpu: h100-sxm}
)";

// Llama 3.1 405B as Meta trained it: 16,384 H100, TP8 x PP16 x DP128, interleaved, 16M tokens.
inline const char* const kLlama31_405b = R"(
name: llama3-405b
model: {arch: llama, layers: 126, hidden: 16384, heads: 128, kv_heads: 8, ffn_hidden: 53248, vocab: 128256,
        seq_len: 8192}
parallel: {tp: 8, pp: 16, cp: 1, sequence_parallel: true, zero: 1}
schedule:
  kind: interleaved-1f1b
  virtual_stages: 2
  layers_per_stage: [3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                     4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3]
train: {global_batch: 2048, micro_batch: 1, precision: bf16, recompute: selective}
cluster: {nodes: 2048, gpus_per_node: 8, gpu: h100-sxm}
)";

inline const char* const kMixtral = R"(
name: mixtral
model: {arch: mixtral, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 32000,
        seq_len: 4096, moe: {experts: 8, top_k: 2, capacity_factor: 1.25}}
parallel: {tp: 2, pp: 1, ep: 8, sequence_parallel: true, zero: 1}
schedule: {kind: 1f1b}
train: {global_batch: 512, micro_batch: 1, precision: bf16, recompute: selective}
cluster: {nodes: 8, gpus_per_node: 8, gpu: h100-sxm}
)";

}  // namespace ptrain::test
