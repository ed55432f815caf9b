// JobSpec: the typed form of a ptrain job YAML (the key names are a contract: docs/config.md).
// Every default lives in this file, next to its field. `load` (loader.h) fills a JobSpec from YAML
// plus --set overrides, checks every rule, and resolves the derived values at the bottom.
//
// How YAML values map onto these fields (enforced by the loader):
// - integers are written as integers: `tp: 2.0`, `steps: 1e3` and `tp: "2"` are errors whose fix
//   names the integer to write; sizes are int32, steps/seed/intervals int64;
// - floats accept YAML 1.2 floats and integers, never .inf/.nan;
// - booleans are true/false only (YAML 1.1's yes/no/on/off are errors);
// - keys marked "nullable" accept `null` (or an empty value) meaning "not given";
// - a section given as `null` (e.g. `comm:` with nothing below) keeps all its defaults.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ptrain::config {

enum class Backend { Auto, Cpu, Cuda };
enum class Arch { Gpt2, Llama, Mixtral };
enum class ScheduleKind { Gpipe, OneFOneB, Interleaved1F1B, ZbH1, Zbv, DualPipeV };
// fp8: bf16 mixed precision with the GEMMs of attention's and the MLP's linear layers in FP8 (docs/fp8.md).
enum class Precision { Fp32, Bf16, Fp8 };
// How an FP8 cast finds its scale: this step's amax of the tensor, or the largest of the last steps'.
enum class Fp8Scaling { Current, Delayed };
enum class Recompute { None, Selective, Full };
// How context-parallel attention reaches the other ranks' keys (parallel/context_parallel.h).
enum class CpComm { Allgather, Ring, A2a };
// Where the optimizer's state lives (zero/data_parallel.h): the device, or the host (ZeRO-Offload).
enum class Offload { None, Optimizer };
// The optimizer (optim/adamw.h): AdamW is the one there is.
enum class OptimizerKind { AdamW };
enum class LrDecay { Cosine, Linear, Constant, Wsd };
enum class DataFormat { Llmc, Megatron, Synthetic };
enum class Resume { Auto, Never };

// The most transformer layers and parameters a job may have: every count, byte and FLOP figure
// validate derives from them stays far inside 64 bits (the largest published models: ~1000 layers,
// ~2 * 10^12 parameters).
inline constexpr int kMaxLayers = 16384;
inline constexpr double kMaxParameters = 1e15;

struct MoeSpec {
  int experts = 8;
  int top_k = 2;
  double capacity_factor = 1.25;
  double aux_loss_coef = 0.01;
};

struct ModelSpec {
  Arch arch = Arch::Gpt2;
  int layers = 12;
  int hidden = 768;
  int heads = 12;
  int kv_heads = 0;    // nullable; 0 or null = not given: resolved to heads
  int ffn_hidden = 0;  // nullable; 0 or null = not given: 4*hidden (gpt2), required
                       // for llama/mixtral
  int vocab = 50257;
  int seq_len = 1024;
  double norm_eps = 1.0e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;  // gpt2 ties by definition (load sets true; false is an error)
  std::optional<MoeSpec> moe;   // arch mixtral only (nullable); mixtral without it gets defaults

  // Derived (filled by load): vocab rounded up to a multiple of parallel.tp.
  int padded_vocab = 0;
  int head_dim() const { return hidden / heads; }
};

struct ParallelSpec {
  int tp = 1;
  int pp = 1;
  int cp = 1;
  int ep = 1;
  int dp = 1;                            // resolved value; see dp_auto
  bool dp_auto = true;                   // `dp: auto` (the default): world / (tp*pp*cp)
  std::string order = "tp-cp-ep-dp-pp";  // first axis varies fastest
  bool sequence_parallel = false;
  int zero = 0;  // 0 | 1 | 2 | 3
  CpComm cp_comm = CpComm::Allgather;
  Offload offload = Offload::None;

  // Derived (filled by load, from the rank grid; false where the grid is refused): whether a MoE
  // model's experts are split over exactly the tp groups, ep = tp > 1 with parallel.order putting the
  // expert grid's ep groups on the tp groups. Then the tp ranks, which hold the same tokens, each run
  // their share of the experts (model/moe_block.h); otherwise (any other ep, or an order that makes
  // other ep groups) the experts are apart from tp and tokens go to them by all-to-all over the ep
  // group. Resolved once, with the grid, rather than rebuilding the grid for each question.
  bool experts_over_tp = false;

  // Ranks that hold the same experts, over which ZeRO shards and reduces them: the expert grid's
  // data-parallel size (grid/rank_grid.h), tp*cp*dp/ep.
  int expert_dp() const { return tp * cp * dp / ep; }
};

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int virtual_stages = 1;
  std::vector<int> layers_per_stage;  // nullable; empty = even split; else one entry per
                                      // virtual stage, in the order of resolved_layers_per_stage
  // nullable (0): the most microbatches whose activations a pp rank holds at once (1f1b and
  // interleaved-1f1b; with virtual stages, in whole microbatches: max_in_flight*virtual_stages
  // chunks). Where the kind's own order holds more, pipeline::build orders the rank's forwards and
  // backwards under the cap instead (engine/pipeline/schedule_capped.cpp): less memory, more bubble.
  int max_in_flight = 0;

  // Derived (filled by load): layers of every virtual stage, pp*virtual_stages entries in virtual
  // stage order (which rank and chunk hold a stage: config/stage_placement.h).
  std::vector<int> resolved_layers_per_stage;
};

// train.fp8: read under precision: fp8 only.
struct Fp8Spec {
  Fp8Scaling scaling = Fp8Scaling::Delayed;  // Transformer Engine's default
  int amax_history = 16;                     // delayed: steps whose amaxes a scale is taken from
};

struct TrainSpec {
  std::int64_t steps = 1000;
  int global_batch = 8;
  int micro_batch = 1;
  Precision precision = Precision::Bf16;
  // The dtype data-parallel gradient reductions travel in. Gradients accumulate in fp32 either way
  // (Megatron's main grads); bf16 halves the reduction traffic. Needs precision: bf16 or fp8; never fp8.
  Precision grad_reduce = Precision::Fp32;
  Fp8Spec fp8;
  Recompute recompute = Recompute::None;
  std::uint64_t seed = 1234;  // 0 .. 2^63-1
  double grad_clip = 1.0;     // 0 disables clipping

  // Derived (filled by load): global_batch / (micro_batch * dp).
  int microbatches = 0;
};

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 3.0e-4;
  double min_lr = 0.0;
  std::array<double, 2> betas = {0.9, 0.95};
  double eps = 1.0e-8;
  double weight_decay = 0.1;
  std::int64_t warmup_steps = 0;
  LrDecay decay = LrDecay::Cosine;
  std::int64_t decay_steps = 0;  // wsd only: length of the final decay phase; 0 = 10% of train.steps
};

struct DataSpec {
  DataFormat format = DataFormat::Synthetic;
  std::string train;            // nullable; llmc: glob of shards; megatron: path prefix of .bin/.idx;
                                // required by both (never opened by the loader)
  std::string valid;            // nullable; same form as train
  std::int64_t eval_every = 0;  // 0 = never
  bool shuffle = true;          // false: sample i = tokens [i*T, i*T+T+1) in file order
};

struct CheckpointSpec {
  std::string dir;         // nullable; empty = no checkpoints
  std::int64_t every = 0;  // 0 = only at the end / on signal
  int keep = 3;            // newest checkpoints kept; 0 = keep all
  Resume resume = Resume::Auto;
  std::string load_hf;  // nullable; empty = null
  bool async = true;    // write in the background from a host copy (train/background_save.h)
};

struct ClusterSpec {
  int nodes = 1;
  int gpus_per_node = 1;
  std::string gpu = "cpu";  // hardware profile name, see plan/hardware.h
  std::string profile;      // nullable; a `ptrain profile` file: compute is timed from its measurements
  double host_memory_gb = 0;  // nullable; 0 = not given: a node's RAM, which offloaded state must fit
};

struct LoggingSpec {
  std::int64_t every = 10;
  std::string metrics;  // nullable; JSONL path; empty = none
  std::string trace;    // nullable; Chrome trace path; empty = none
  std::string tensorboard;  // nullable; TensorBoard event-file directory; empty = none
  // A rank whose compute stays above straggler_ratio x the median rank's for straggler_steps steps
  // in a row is warned of (train/stragglers.h).
  double straggler_ratio = 1.2;
  std::int64_t straggler_steps = 5;
};

struct CommSpec {
  double timeout_s = 600.0;
};

struct JobSpec {
  std::string name = "ptrain";
  Backend backend = Backend::Auto;
  ModelSpec model;
  ParallelSpec parallel;
  ScheduleSpec schedule;
  TrainSpec train;
  OptimizerSpec optimizer;
  DataSpec data;
  CheckpointSpec checkpoint;
  ClusterSpec cluster;
  LoggingSpec logging;
  CommSpec comm;

  // Derived (filled by load): LoadOptions::world if given, else cluster.nodes*cluster.gpus_per_node;
  // equals tp*pp*cp*dp once the job is valid.
  int world = 1;
};

// Names as they are spelled in YAML (for messages and reports).
const char* to_string(Backend);
const char* to_string(Arch);
const char* to_string(ScheduleKind);
// Whether the schedule runs the weight grad as its own instruction W, after B (zb-h1, zbv, dualpipev).
bool splits_weight_grad(ScheduleKind);
// The highest ZeRO stage a job's pipeline allows: 1 where gradients are complete only after the
// step's backward (a schedule that splits W; pp > 1 with a tied word embedding, whose two copies
// sum their gradients at the end), since ZeRO 2 and 3 reduce them per microbatch; else 3.
int most_zero_stage(ScheduleKind kind, int pp, bool tie_embeddings);
// The fewest microbatches per step the kind runs with pp stages: pp for 1f1b, zb-h1 and zbv (their
// warm-up fills the pipeline; ZB-V's memory bound, 1F1B's, leaves no bubble to fill with fewer),
// 2*pp for dualpipev (its steady phase runs at least once on rank 0 only from 2*pp on), 1 for gpipe
// and interleaved-1f1b (which needs a multiple of pp instead).
int least_microbatches(ScheduleKind kind, int pp);
// Whether schedule.max_in_flight applies to the kind (1f1b, interleaved-1f1b).
bool caps_in_flight(ScheduleKind);
// The fewest microbatches in flight a capped 1f1b / interleaved-1f1b can run with: before any
// backward can start, every rank runs the forwards of the first microbatch's last chunk and of the
// pp microbatches of each earlier chunk ahead of it, (vpp-1)*pp + 1 chunks; in whole microbatches,
// rounded up.
int least_in_flight(int pp, int vpp);
const char* to_string(Precision);
const char* to_string(Fp8Scaling);
// Whether weights and activations are bf16 working copies of fp32 masters (bf16 and fp8 alike).
constexpr bool bf16_working(Precision p) { return p != Precision::Fp32; }
const char* to_string(Recompute);
const char* to_string(CpComm);
const char* to_string(Offload);
const char* to_string(OptimizerKind);
const char* to_string(LrDecay);
const char* to_string(DataFormat);
const char* to_string(Resume);

}  // namespace ptrain::config
