// Hardware profiles for validate and plan: memory, peak FLOP/s, bandwidths. Numbers are the
// vendors' published dense peaks (no sparsity):
//   h100-sxm  NVIDIA H100 SXM5 datasheet: 80 GB HBM3 at 3.35 TB/s; 989 TFLOP/s bf16 dense, 1,979 fp8;
//             fp32 = 67 TFLOP/s, the non-tensor-core FP32 peak (ptrain's fp32 path does not use
//             TF32; the TF32 tensor-core peak would be 494.5 TFLOP/s); NVLink 4 = 900 GB/s
//             bidirectional = 450 GB/s per direction per GPU; one 400 Gb/s NIC (ConnectX-7) per
//             GPU = 50 GB/s.
//   h200      H100's compute and links, 141 GB HBM3e at 4.8 TB/s.
//   a100-80g  A100 SXM4 80GB: 312 TFLOP/s bf16, 19.5 TFLOP/s fp32, no FP8 tensor cores, 2.0 TB/s (2,039 GB/s) HBM2e;
//             NVLink 3 = 600 GB/s bidirectional = 300 GB/s per direction; 200 Gb/s HDR per GPU.
//   cpu       a CPU rank (tests and the demo): a host of 24 GiB, shared by a node's ranks
//             (cluster.host_memory_gb gives the real one; memory_limit.h), a nominal 400 GFLOP/s
//             (2 AVX-512 cores: 2 FMA units x 16 lanes x 2 flops x ~3 GHz x 2 cores = 384 GFLOP/s;
//             bf16 and FP8's emulation counted at the fp32 rate), 20 GB/s memory,
//             10 GB/s between ranks of one host (shared-memory loopback), 1.25 GB/s (10 GbE)
//             between hosts; "host copies" are memcpy within that memory (10 GB/s).
// The host side, for the optimizer offload: device-host copies over PCIe per direction (Gen5 x16
// = 64 GB/s for H100/H200, Gen4 x16 = 32 GB/s for A100: the PCI-SIG rates), and a rank's share of
// its node's host memory bandwidth, which the host's AdamW streams at (DGX H100: 2 sockets x 8
// channels of DDR5-4800 = 614 GB/s over 8 GPUs = 77 GB/s; DGX A100: 2 x 8 channels of DDR4-3200 =
// 410 GB/s over 8 = 51 GB/s).
// Memory is the marketing size in decimal GB (80e9 B, below the 80 GiB of physical HBM): the
// difference is the CUDA context, NCCL and the allocator's fragmentation. Latency: ~5 us over
// NVLink, ~10 us over InfiniBand, charged once per collective (traffic.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/plan/measured_profile.h"

namespace ptrain::plan {

struct HardwareProfile {
  std::string name;        // "h100-sxm", "h200", "a100-80g", "cpu"
  double memory_bytes;     // usable device memory
  double peak_flops_bf16;  // dense
  double peak_flops_fp32;
  // The rate FP8 GEMMs run at (train.precision fp8's linear layers, plan/fp8_time.h): the FP8 tensor
  // cores' dense peak; 0 without them; on the CPU its emulation's, the fp32 GEMM's.
  double peak_flops_fp8;
  double hbm_bytes_per_s;         // device memory bandwidth
  double intra_node_bytes_per_s;  // per-GPU NVLink (unidirectional) bandwidth
  double inter_node_bytes_per_s;  // per-GPU network bandwidth
  double intra_node_latency_s;
  double inter_node_latency_s;
  double host_link_bytes_per_s;    // device <-> host copies, per direction
  double host_memory_bytes_per_s;  // the rank's share of the host's memory bandwidth
  // Collectives on host memory (a CPU rank's Gloo) complete on return: nothing overlaps them, so a
  // step pays ZeRO's reductions and gathers whole. Device collectives (NCCL) run beside compute.
  bool host_collectives = false;
  // A `ptrain profile` measurement (cluster.profile, or the built-in one on a GPU: builtin_profile.h;
  // another GPU's carried here: profile_transfer.h): compute is timed op by op from it
  // (compute_time.h); without one, at kGemmEfficiency of the peak (step_time.h).
  std::shared_ptr<const MeasuredProfile> measured = nullptr;

  double peak_flops(config::Precision precision) const;
  bool device_is_host() const { return name == "cpu"; }  // a CPU rank: "device" memory is the host's
  bool runs_fp8() const { return peak_flops_fp8 > 0; }   // FP8 tensor cores (the CPU: its emulation)
  double link_bytes_per_s(bool inter_node) const {
    return inter_node ? inter_node_bytes_per_s : intra_node_bytes_per_s;
  }
  double link_latency_s(bool inter_node) const {
    return inter_node ? inter_node_latency_s : intra_node_latency_s;
  }
};

const HardwareProfile* find_hardware(std::string_view name);  // nullptr if unknown
std::vector<std::string> hardware_names();

}  // namespace ptrain::plan
