#include "app/job_loading.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "app/output_file.h"
#include "engine/config/engine_limits.h"
#include "engine/data/datasets.h"
#include "engine/io/input_file.h"
#include "engine/io/output_probe.h"
#include "engine/plan/builtin_profile.h"
#include "engine/plan/profile_transfer.h"
#include "kernels/cpu/isa.h"
#include "kernels/cudnn_attention_mode.h"

namespace ptrain::app {

void add_job_args(CLI::App& command, JobArgs& args) {
  command.add_option("job", args.job_path, "Job spec (YAML)")->required();
  command.add_option("--set", args.overrides, "Override a key: --set parallel.tp=4 (repeatable; same checks as YAML)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

config::LoadResult load_job(const JobArgs& args, std::optional<int> world) {
  config::LoadOptions opts;
  opts.overrides = args.overrides;
  opts.world = world;
  config::LoadResult job = config::load_file(args.job_path, opts);
  check_environment(job.diags);
  return job;
}

void check_environment(config::Diagnostics& diags) {
  // The CUDA backend's attention and the memory model read it (kernels/cudnn_attention_mode.h).
  const char* attention = std::getenv(kernels::kCudnnAttentionVariable);
  if (!kernels::parse_cudnn_attention_mode(attention))
    diags.errors.push_back(config::Diagnostic{kernels::kCudnnAttentionVariable, 0, 0,
                                              "must be auto, fast, deterministic or off, got '" + std::string(attention) + "'",
                                              "unset it for the default, auto", "environment"});
  // The CPU kernels' instruction set cap (kernels/cpu/isa.h).
  if (const char* isa = std::getenv("PTRAIN_CPU_ISA"); !kernels::cpu::valid_isa_cap(isa))
    diags.errors.push_back(config::Diagnostic{"PTRAIN_CPU_ISA", 0, 0,
                                              "must be generic, avx2 or avx512, got '" + std::string(isa) + "'",
                                              "unset it to use the best this CPU runs", "environment"});
}

namespace {

// The job's device and the profile its times come from (find_job_hardware, before the attention check).
std::optional<plan::HardwareProfile> job_hardware(config::LoadResult& job) {
  const plan::HardwareProfile* hw = plan::find_hardware(job.spec.cluster.gpu);
  if (hw == nullptr) {
    std::string known;
    for (const auto& name : plan::hardware_names()) known += (known.empty() ? "" : ", ") + name;
    job.diags.errors.push_back(
        job.at("cluster.gpu", "unknown GPU '" + job.spec.cluster.gpu + "'", "use one of: " + known));
    return std::nullopt;
  }
  if (job.spec.train.precision == config::Precision::Fp8 && !hw->runs_fp8()) {
    job.diags.errors.push_back(job.at("train.precision",
                                      "fp8 on cluster.gpu " + hw->name +
                                          ", which has no FP8 tensor cores (compute capability 8.9 or later)",
                                      "set train.precision: bf16, or cluster.gpu: h100-sxm or h200"));
    return std::nullopt;
  }
  plan::HardwareProfile out = *hw;
  const std::string& path = job.spec.cluster.profile;
  if (path == plan::kPeakModel) return out;
  if (path.empty()) {
    try {
      out.measured = plan::builtin_profile(out);
    } catch (const std::invalid_argument& e) {  // a build defect; a run must not stop for the cost model
      job.diags.warnings.push_back(job.at("cluster.gpu",
                                          std::string("the built-in profile does not load (") + e.what() +
                                              "): step times at peak x 60%",
                                          "give cluster.profile a `ptrain profile` of the GPU"));
    }
    return out;
  }
  std::string text;
  try {
    text = io::read_input_file(path);
  } catch (const io::FileError& e) {
    // Like the data paths, a relative one is read from where ptrain runs.
    const std::filesystem::path file(path);
    const std::string where =
        file.is_relative() ? " (relative to the working directory, " + std::filesystem::current_path().string() + ")" : "";
    job.diags.errors.push_back(job.at("cluster.profile", "cannot read the profile " + path + where + ": " + e.detail(),
                                      "run from the directory the path is relative to, give its absolute path, or "
                                      "measure one with `ptrain profile --out " + path + "`"));
    return std::nullopt;
  }
  plan::MeasuredProfile profile;
  try {
    profile = plan::from_json(text);
  } catch (const std::invalid_argument& e) {
    job.diags.errors.push_back(job.at("cluster.profile", path + " is not a ptrain profile: " + e.what(),
                                      "measure it again with `ptrain profile`"));
    return std::nullopt;
  }
  // What `ptrain profile` wrote that it could not trust (plan/profile_doubts.h): said again here.
  if (!profile.doubts.empty()) {
    std::string doubts;
    for (const std::string& d : profile.doubts) doubts += (doubts.empty() ? "" : "; ") + d;
    job.diags.warnings.push_back(job.at("cluster.profile",
                                        path + " holds measurements that `ptrain profile` could not trust even "
                                            "measured again (a busy machine?), and step times from it are off by "
                                            "as much: " + doubts,
                                        "measure it again on an idle machine: `ptrain profile --out " + path + "`"));
  }
  // The tables of the job's element type: the rest are read through them. fp8 reads bf16's (its
  // GEMMs at the FP8 rate over bf16's time, the rest as bf16: plan/fp8_time.h), and `plan` tries a
  // bf16 or fp8 job in both.
  const char* element = plan::element_name(config::bf16_working(job.spec.train.precision));
  if (profile.gemm.count(element) == 0) {
    job.diags.errors.push_back(job.at("cluster.profile",
                                      path + " measured no " + element + " kernels, and train.precision is " +
                                          config::to_string(job.spec.train.precision),
                                      "measure the profile again with `ptrain profile` (it times both)"));
    return std::nullopt;
  }
  // A CPU's profile and a GPU's do not mix; a profile of another GPU is carried to this one by
  // datasheet ratios, and one of a GPU without an entry here is read as measured, with a warning.
  const bool measured_a_cpu = profile.backend == "cpu";
  if (measured_a_cpu != out.device_is_host()) {
    job.diags.errors.push_back(job.at("cluster.profile",
                                      path + " measured " + (measured_a_cpu ? "a CPU" : "a GPU (" + profile.device + ")") +
                                          ", and cluster.gpu is " + out.name +
                                          ": a profile is carried from one GPU to another, never between a CPU and a GPU",
                                      "measure a profile of " + out.name + " with `ptrain profile`"));
    return std::nullopt;
  }
  const plan::HardwareProfile* measured_on = plan::measured_hardware(profile);
  if (measured_on == nullptr)
    job.diags.warnings.push_back(job.at("cluster.profile",
                                        path + " measured " + profile.device + ", a GPU with no datasheet entry here: " +
                                            "its times are read as they were measured, for " + out.name,
                                        "profile the GPU the job runs on"));
  else if (measured_on->name != out.name)
    profile = plan::transfer_profile(profile, *measured_on, out);
  out.measured = std::make_shared<const plan::MeasuredProfile>(std::move(profile));
  return out;
}

}  // namespace

std::optional<plan::HardwareProfile> find_job_hardware(config::LoadResult& job) {
  std::optional<plan::HardwareProfile> hw = job_hardware(job);
  // A GPU's bf16 attention (fp8 jobs' too: attention stays bf16) runs the kernels
  // PTRAIN_CUDNN_ATTENTION picks; a profile timed others.
  const std::optional<kernels::CudnnAttentionMode> mode =
      kernels::parse_cudnn_attention_mode(std::getenv(kernels::kCudnnAttentionVariable));
  if (hw && hw->measured && mode && !hw->device_is_host() && config::bf16_working(job.spec.train.precision)) {
    const std::string mismatch = plan::attention_mismatch(*hw->measured, *mode);
    if (!mismatch.empty())
      job.diags.warnings.push_back(config::Diagnostic{
          kernels::kCudnnAttentionVariable, 0, 0, mismatch,
          "give cluster.profile a `ptrain profile --backend cuda` run with the same PTRAIN_CUDNN_ATTENTION (for an "
          "H100 and ptrain's own kernels: profiles/h100-sxm-own-attention.json)",
          "environment"});
  }
  return hw;
}

std::optional<plan::Estimate> estimate_job(config::LoadResult& job) {
  const std::optional<plan::HardwareProfile> hw = find_job_hardware(job);
  if (!hw) return std::nullopt;
  return plan::estimate(job, *hw);
}

std::vector<config::Diagnostic> engine_limit_warnings(const config::LoadResult& job) {
  std::vector<config::Diagnostic> out;
  for (const config::EngineLimit& limit : config::engine_limits(job.spec))
    out.push_back(job.at(limit.key, limit.message, limit.fix));
  return out;
}

std::vector<config::Diagnostic> run_output_errors(const config::LoadResult& job) {
  const config::LoggingSpec& logging = job.spec.logging;
  const struct {
    const char* key;
    const std::string& path;
    io::OutputKind kind;
  } outputs[] = {{"logging.metrics", logging.metrics, io::OutputKind::File},
                 {"logging.trace", logging.trace, io::OutputKind::File},
                 {"logging.tensorboard", logging.tensorboard, io::OutputKind::Folder},
                 {"checkpoint.dir", job.spec.checkpoint.dir, io::OutputKind::Folder}};
  // What the run reads: a log written over one of them loses it (the job file, a data shard).
  std::vector<NamedInput> inputs = {{"the job file", job.origin}, {"cluster.profile", job.spec.cluster.profile}};
  for (const std::string& file : data::data_files(job.spec.data)) inputs.push_back({"a data file", file});
  std::vector<config::Diagnostic> out;
  for (const auto& o : outputs) {
    if (o.path.empty()) continue;
    const bool file = o.kind == io::OutputKind::File;
    if (const std::string other = io::other_kind_at(o.path, o.kind); !other.empty()) {
      out.push_back(job.at(o.key, "'" + o.path + "' is " + other + ", not a " + (file ? "regular file" : "directory"),
                           std::string("name a ") + (file ? "file" : "folder") + " to write, or remove what is there"));
      continue;
    }
    // The checkpoints replace and remove what is there (latest, step_N): a record there is lost with it.
    const std::string& checkpoints = job.spec.checkpoint.dir;
    if (&o.path != &checkpoints && io::is_within(o.path, checkpoints)) {
      out.push_back(job.at(o.key,
                           "'" + o.path + "' is inside checkpoint.dir (" + checkpoints +
                               "), where the checkpoints replace and remove files: the run's records would be lost",
                           "write them beside checkpoint.dir, not in it (runs/X/metrics.jsonl beside runs/X/ckpt)"));
      continue;
    }
    if (!file) continue;
    if (const NamedInput* in = written_over(o.path, inputs))
      out.push_back(job.at(o.key, "'" + o.path + "' is " + in->what + " (" + in->path + "), which the run reads: "
                                  "writing it there would destroy it", "name another file"));
  }
  if (!logging.metrics.empty() && io::same_file(logging.metrics, logging.trace))
    out.push_back(job.at("logging.trace", "'" + logging.trace + "' is also logging.metrics: the two would write "
                                          "over each other", "name another file"));
  return out;
}

void print_diagnostics(const config::Diagnostics& diags) {
  for (const auto& d : diags.errors) std::fprintf(stderr, "error: %s\n", d.format().c_str());
  for (const auto& d : diags.warnings) std::fprintf(stderr, "warning: %s\n", d.format().c_str());
}

}  // namespace ptrain::app
