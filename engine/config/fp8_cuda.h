// What the CUDA backend's FP8 GEMMs (kernels/cuda/fp8_gemm.cu: cuBLASLt's FP8 kernels) need of a job
// under train.precision: fp8, as pure functions of the spec: validate refuses a job with
// backend: cuda at the key they name, and `run` a job whose backend resolves to a GPU (app/run_backend).
#pragma once

#include <optional>
#include <string>

#include "engine/config/job_spec.h"

namespace ptrain::config {

struct Fp8CudaRefusal {
  std::string key, reason, fix;
};

// cuBLASLt's FP8 GEMMs take dimensions that are multiples of 16 only (their operands' leading
// dimensions are 16 bytes at least): every GEMM dimension of a rank's FP8 linear layers -- its
// tokens per microbatch (micro_batch * seq_len / cp; sequence parallelism gathers them whole), the
// hidden size, the tp shards of the attention's q/output columns, of the k/v columns and of the
// MLP's hidden size, and an MoE expert GEMM's rows (config/moe_capacity.h). The first that is not,
// at its key; nullopt when all are (or not fp8).
std::optional<Fp8CudaRefusal> fp8_shape_refusal(const JobSpec& spec);

// FP8 tensor cores: compute capability 8.9 (Ada) or later (Hopper 9.0). `compute_capability` is
// major * 10 + minor of the device the job would run on.
inline bool has_fp8_tensor_cores(int compute_capability) { return compute_capability >= 89; }
// nullopt where the device has them (or not fp8).
std::optional<Fp8CudaRefusal> fp8_device_refusal(const JobSpec& spec, int compute_capability);

}  // namespace ptrain::config
