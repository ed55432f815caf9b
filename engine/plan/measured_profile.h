// A hardware profile measured by `ptrain profile` with the engine's own kernels: the times of the
// ops the layer description (model/layer_description.h) is made of, on a grid of shapes, and how
// to read a time between the grid's points. Pure: JSON in and out, interpolation.
//
// Tables (one per element type: "f32", "bf16"):
//   gemm       linear_forward, linear_backward's input gradient and its weight gradient, each
//              on every (m, n, k) of three size lists; read trilinearly in log2 m, n, k on log
//              seconds; outside the grid, at the nearest grid point scaled by the FLOPs (the
//              throughput of the edge). Also "fp8" (optional: measured where FP8 runs, the CPU's
//              emulation and GPUs of compute capability 8.9+): fp8_gemm over codes already cast,
//              E4M3 x E4M3 into bf16 (forward), E5M2 x E4M3 into bf16 (input gradient) and
//              accumulated into f32 (weight gradient); plan/fp8_time.h adds the casts.
//   attention  causal attention forward and backward over sequence lengths for one head_dim and
//              head count; read per query-key pair and head, linear in log seq on log seconds,
//              the nearest measured head_dim scaled by head_dim.
//   memory     each memory-bound op family (norm, rope, activation, routing, embedding, loss) at
//              a few sizes, forward and backward; read piecewise linear in bytes (a latency and a
//              bandwidth), extrapolated from the last two points. "optimizer/f32" is AdamW over a
//              shard, its bytes 4 per fp32 element.
// File format (JSON, schema "ptrain.profile.v2"; v2 added the layernorm and gelu tables and the
// calibration, so a v1 file is refused: measure again): see to_json / from_json; docs/formats.md.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/layer_description.h"
#include "kernels/cudnn_attention_mode.h"

namespace ptrain::plan {

struct GemmTable {
  std::vector<std::int64_t> m, n, k;  // ascending
  // Seconds at [i][j][l] = index (i * n.size() + j) * k.size() + l.
  std::vector<double> forward_s, input_grad_s, weight_grad_s;
};

struct AttentionTable {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, head_dim = 64;
  std::vector<std::int64_t> seq;  // ascending
  std::vector<double> forward_s, backward_s;
};

struct MemoryPoint {
  double bytes = 0;  // forward bytes read and written (the description's Op::memory_bytes)
  double forward_s = 0, backward_s = 0;
};

// Collectives over `ranks` local ranks (`ptrain profile --nproc N`), by kind: points of the
// buffer size S the traffic model uses (traffic.h) and the slowest rank's seconds for one call.
struct CollectiveTable {
  int ranks = 0;
  std::string transport;  // "gloo" or "nccl"
  std::map<std::string, std::vector<std::pair<double, double>>> points;  // kind -> (bytes, seconds)
};
const char* collective_name(model::CollectiveKind kind);  // "all_reduce", ..., "send_recv"

// The engine's own training step of a reference job on this machine against the op-by-op
// prediction of the same step from the tables: what a step spends beyond the ops the layer
// description lists (buffer clears, bias gradients, copies, the host's serial work between ops).
// compute_scale = (measured step - measured optimizer) / predicted compute, which stage_compute
// applies to every stage's compute.
struct Calibration {
  std::string job;  // the reference job, in words
  double measured_step_s = 0, predicted_compute_s = 0, compute_scale = 1;
  // The reference job as it ran (a job file; empty in profiles written before 2026-11-27): run it
  // again and compare its typical step with measured_step_s to see whether the machine still runs
  // at the speed it was profiled at (bench/step_time_vs_validate.py does, around each job).
  std::string job_yaml;
};

// How far step times from this profile held against runs on its machine
// (bench/step_time_vs_validate.py): |measured / predicted - 1| over `jobs` short runs.
struct Accuracy {
  int jobs = 0;
  double median_error = 0, worst_error = 0;
  std::string date;  // of the runs
  std::string how;   // what was run, in words
};

// A profile carried from the GPU it measured to another by datasheet ratios (profile_transfer.h):
// its times are the measured ones times the compute ratio of their element type (GEMM, attention)
// or `memory_ratio` (memory-bound ops). Set by transfer_profile only, never read from or written
// to a file (to_json refuses a carried profile: read back, it would be carried again).
struct Transfer {
  std::string from, to;  // hardware names (hardware.h)
  double bf16_ratio = 1, fp32_ratio = 1, memory_ratio = 1;
};

struct MeasuredProfile {
  std::string device, backend, date, ptrain_version;
  std::map<std::string, std::string> versions;  // driver and library versions
  // GPU profiles: the PTRAIN_CUDNN_ATTENTION mode their bf16 attention ran under (off also where
  // cuDNN was not there: ptrain's own kernels); unset in CPU profiles and GPU ones before 2026-11-27.
  std::optional<kernels::CudnnAttentionMode> cudnn_attention;
  bool quick = false;
  // CPU profiles: the threads each op ran on and the machine's cores; a rank of a job with more
  // ranks per host runs on fewer (compute_time.h scales for it).
  int threads = 1, cores = 1;
  std::map<std::string, GemmTable> gemm;                    // by element type
  std::map<std::string, std::vector<AttentionTable>> attention;  // by element type
  std::map<std::string, std::vector<MemoryPoint>> memory;   // by "family/element type"
  std::optional<CollectiveTable> collectives;                // intra-node, when measured
  std::optional<Calibration> calibration;                    // where profile ran the reference step
  std::optional<Accuracy> accuracy;                          // once the sweep has checked it
  std::optional<Transfer> transfer;                          // read for another GPU than it measured
  // What `ptrain profile` could not trust after measuring it again (profile_doubts.h), in words:
  // validate repeats them. Empty in a profile it trusted whole and in profiles before 2026-12-07.
  std::vector<std::string> doubts;
  bool built_in = false;  // compiled into the binary (builtin_profile.h); never in a file
};

// Where the attention kernels a bf16 job runs with `mode` are not the ones `profile` timed (cuDNN's
// or ptrain's own, cuDNN's fast or deterministic backward; auto counts as fast, which it is at most):
// what the step time then misses, in words. Empty where they agree or the profile does not say.
std::string attention_mismatch(const MeasuredProfile& profile, kernels::CudnnAttentionMode mode);

// What a step time predicted with `profile` (nullptr: peak x 60%) is worth, in words: the profile's
// checked accuracy, or that it has none, or how far a transferred profile or peak x 60% was
// measured to be off (`cpu`: on a CPU, where it is off by several times and says to profile).
std::string expected_error(const MeasuredProfile* profile, bool cpu = false);

// Seconds of one collective of `bytes` (S) over `ranks` ranks of one node, read from the measured
// table: piecewise linear in S, at the S whose ring traffic on the measured group equals this
// group's (so a group of another size moves as many bytes per rank); nullopt without a table.
std::optional<double> collective_seconds(const MeasuredProfile& profile, model::CollectiveKind kind, int ranks,
                                         double bytes);

// The name of an op family's memory table: "norm", "rope", "activation", "routing", "embedding",
// "loss" (nullptr for GEMM, attention and collective ops).
const char* memory_family(model::OpKind kind);
const char* element_name(bool bf16);  // "bf16" / "f32"
inline constexpr const char* kFp8GemmElement = "fp8";  // the FP8 GEMM table's (gemm only)

// Forward (or backward) seconds of `bytes` through a memory table ("norm/f32", "optimizer/f32", ...);
// std::invalid_argument if the profile lacks it.
double memory_seconds(const MeasuredProfile& profile, const std::string& table, double bytes, bool backward);

struct OpSeconds {
  double forward = 0, input_grad = 0, weight_grad = 0;
};
// One op's times on the rank (collectives: 0, the traffic model times them). std::invalid_argument
// if the profile lacks the table the op needs.
OpSeconds op_seconds(const MeasuredProfile& profile, const model::Op& op, bool bf16);
// A GEMM op's times from the GEMM table of `element` ("f32", "bf16", kFp8GemmElement).
OpSeconds gemm_op_seconds(const MeasuredProfile& profile, const model::Op& op, const std::string& element);

std::string to_json(const MeasuredProfile& profile);
// A collective table alone (what the workers of `ptrain profile --nproc` hand to their launcher).
std::string to_json(const CollectiveTable& table);
CollectiveTable collectives_from_json(const std::string& text);
// std::invalid_argument naming the field on a malformed file (wrong schema, unsorted or missing
// grids, sizes that do not match, non-positive times).
MeasuredProfile from_json(const std::string& text);

}  // namespace ptrain::plan
