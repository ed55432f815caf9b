// Hardware profiles for validate and plan: memory, peak FLOP/s, bandwidths. Numbers are the
// vendors' published dense peaks (no sparsity); sources in README.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ptrain::plan {

struct HardwareProfile {
  std::string name;             // "h100-sxm", "h200", "a100-80g", "cpu"
  double memory_bytes;          // usable device memory
  double peak_flops_bf16;       // dense
  double peak_flops_fp32;
  double hbm_bytes_per_s;       // device memory bandwidth
  double intra_node_bytes_per_s;  // per-GPU NVLink (unidirectional) bandwidth
  double inter_node_bytes_per_s;  // per-GPU network bandwidth
  double intra_node_latency_s;
  double inter_node_latency_s;
};

const HardwareProfile* find_hardware(std::string_view name);  // nullptr if unknown
std::vector<std::string> hardware_names();

}  // namespace ptrain::plan
