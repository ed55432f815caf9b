#include "app/profile_calibration.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "engine/comm/comm.h"
#include "engine/config/loader.h"
#include "engine/plan/estimate.h"
#include "engine/plan/hardware.h"
#include "engine/plan/profile_transfer.h"
#include "engine/train/trainer.h"

namespace ptrain::app {
namespace {

struct Reference {
  const char* words;
  const char* model;
  const char* train;
};

// Shapes unlike the CPU sweep's (bench/step_time_vs_validate.py) and the GPU benchmark jobs', so
// those check the calibrated model rather than repeat the calibration.
const Reference kCpu{"Llama, 2 layers, hidden 256, seq 256, 2 x 2 sequences, fp32",
                     "{arch: llama, layers: 2, hidden: 256, heads: 8, kv_heads: 4, ffn_hidden: 704, vocab: 2048, "
                     "seq_len: 256}",
                     "global_batch: 4, micro_batch: 2, precision: fp32"};
const Reference kCuda{"GPT-2 124M, seq 1024, 2 x 8 sequences, bf16",
                      "{arch: gpt2, layers: 12, hidden: 768, heads: 12, vocab: 50304, seq_len: 1024}",
                      "global_batch: 16, micro_batch: 8, precision: bf16"};

}  // namespace

plan::Calibration calibrate(const kernels::Ops& ops, const plan::MeasuredProfile& profile, bool quick) {
  const bool cpu = ops.device() == kernels::Device::Cpu;
  const Reference& ref = cpu ? kCpu : kCuda;
  // The job names the GPU measured, so that validate reads the profile as it is when the job is run
  // again (the sweep's drift probe, bench/step_time_vs_validate.py's cluster.gpu), not carried to an
  // H100 from the H200 it measured; a GPU without an entry of its own is timed as an H100 SXM.
  const plan::HardwareProfile* own = plan::measured_hardware(profile);
  const std::string gpu = own != nullptr ? own->name : "h100-sxm";  // a CPU profile's is "cpu"
  const int steps = quick ? 16 : 24;
  const std::string text = std::string("name: calibration\nbackend: ") + (cpu ? "cpu" : "cuda") +
                           "\nmodel: " + ref.model +
                           "\nparallel: {tp: 1, pp: 1, dp: 1, zero: 0}\nschedule: {kind: 1f1b}\n"
                           "train: {steps: " + std::to_string(steps) + ", " + ref.train +
                           ", recompute: none, seed: 1}\n"
                           "optimizer: {kind: adamw, lr: 1.0e-4, warmup_steps: 0, decay: constant}\n"
                           "data: {format: synthetic}\ncluster: {nodes: 1, gpus_per_node: 1, gpu: " + gpu +
                           "}\nlogging: {every: " + std::to_string(steps) + "}\n";
  const config::LoadResult job = config::load_string(text, "the calibration job");
  if (!job.ok()) throw std::runtime_error("the calibration job does not load: " + job.diags.errors.front().message);
  plan::HardwareProfile hw = *plan::find_hardware(gpu);
  hw.measured = std::make_shared<const plan::MeasuredProfile>(profile);
  const plan::Estimate predicted = plan::estimate(job, hw);
  const plan::Estimate::StepBreakdown& b = predicted.breakdown;
  const double compute = b.gemm_s + b.attention_s + b.memory_bound_s;

  const std::unique_ptr<dist::Comm> solo = dist::make_solo_comm();
  train::Trainer trainer(job.spec, ops, *solo);
  const train::RunResult result = trainer.run();
  if (!result.typical_step) throw std::runtime_error("the calibration job ran no step");
  const double measured_compute = result.typical_step->step_s - result.typical_step->optimizer_s;
  return {ref.words, result.typical_step->step_s, compute, measured_compute / compute, text};
}

}  // namespace ptrain::app
