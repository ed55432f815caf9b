// `ptrain profile [--backend cpu|cuda] [--nproc N] [--quick] [--out FILE]`: measures this machine
// with the engine's own kernels (app/profile_runs.h), calibrates them against a reference training
// step (app/profile_calibration.h) and, with N > 1 ranks, its collectives
// (app/profile_collectives.h), and writes a hardware profile (plan/measured_profile.h) that
// `validate`, `plan` and `schedule` time a job from when it names it in cluster.profile.
//
// With --nproc N the command first starts N workers of itself through the local launcher (as
// `ptrain run` does, before this process has threads of its own, which would take the launcher's
// SIGCHLD); every worker joins the rendezvous and times the collectives, rank 0 hands the table
// back in a file (--collectives-to), and this process then measures the kernels and writes the
// whole profile. Under srun or mpirun each process is such a worker, and rank 0 measures the
// kernels after the collectives and writes the profile itself.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/exit_codes.h"
#include "app/flag_checks.h"
#include "app/job_loading.h"
#include "app/output_file.h"
#include "app/profile_calibration.h"
#include "app/profile_collectives.h"
#include "app/profile_runs.h"
#include "app/run_logs.h"
#include "app/worker_process.h"
#include "engine/plan/profile_doubts.h"
#include "engine/comm/session.h"
#include "engine/config/fp8_cuda.h"
#include "engine/io/input_file.h"
#include "engine/launch/launcher.h"
#include "engine/launch/worker_env.h"
#include "engine/log/log.h"
#include "kernels/backend_module.h"
#include "kernels/cpu/threads.h"
#include "kernels/cuda_backend.h"
#include "kernels/cudnn_attention_mode.h"

namespace ptrain::app {
namespace {

struct ProfileArgs {
  std::string backend = "cpu";
  std::string out = "profile.json";
  bool quick = false;
  bool force = false;  // replace --out even where ptrain profile did not write it
  int nproc = 1;
  std::string collectives_to;  // a worker started by this command's launcher: where rank 0 puts its table
};

// The CPU's model name (Linux /proc/cpuinfo), or "cpu".
std::string cpu_name() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const std::size_t start = line.find_first_not_of(' ', line.find(':') + 1);
      return start == std::string::npos ? "cpu" : line.substr(start);
    }
  return "cpu";
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

// Whether `path` holds a profile this command wrote (any schema version): what it may replace.
bool written_by_profile(const std::string& path) {
  try {
    const io::InputFile file(path);
    if (file.size() > (std::int64_t{64} << 20)) return false;
    const nlohmann::json j = nlohmann::json::parse(file.read_all(), nullptr, false);
    return j.is_object() && j.contains("schema") && j["schema"].is_string() &&
           j["schema"].get<std::string>().rfind("ptrain.profile.", 0) == 0;
  } catch (const io::FileError&) {  // a named pipe, a directory: nothing profile wrote
    return false;
  }
}

// Exit 2 before any measuring where --out cannot be written or is a file of the user's.
bool refuse_out(const ProfileArgs& args) {
  return refuse_unwritable_output("--out", args.out) ||
         refuse_replacing_foreign_file(args.out, "profile", args.force, written_by_profile);
}

// What a profile says it measured: the device, and its driver's and libraries' versions; and
// whether it runs FP8 GEMMs (the CPU's emulation; FP8 tensor cores), whose table it then measures.
struct Machine {
  std::string device;
  std::map<std::string, std::string> versions;
  bool fp8 = true;
};

// The backend to measure, or nullptr after saying why not.
const kernels::Ops* backend_ops(const ProfileArgs& args, int local_rank, Machine& machine) {
  std::string& device = machine.device;
  device = cpu_name() + " (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
  if (args.backend == "cpu") return &kernels::cpu_ops();
  const kernels::CudaBackend* cuda = kernels::cuda_backend();
  if (cuda == nullptr) {
    log::kernels().error("--backend cuda, but {}", kernels::cuda_module_status().detail);
    return nullptr;
  }
  if (!cuda->device_available()) {
    log::kernels().error("--backend cuda, but no CUDA device is visible");
    return nullptr;
  }
  const int index = cuda->select_device(local_rank);
  device = cuda->describe_device(machine.versions) + " (cuda device " + std::to_string(index) + ")";
  machine.fp8 = config::has_fp8_tensor_cores(cuda->compute_capability(index));
  return &cuda->ops();
}

// A table the checks doubt (plan/profile_doubts.h) is measured again at most this many times; the
// calibration is run again each time. What stays doubtful is written into the profile.
constexpr int kRemeasures = 2;

// Replaces `into`'s tables (and their spreads) with those `again` measured.
void take_tables(MeasuredTables& into, const MeasuredTables& again, const std::set<std::string>& tables) {
  for (const std::string& table : tables) into.spread.erase(table);
  for (const auto& [table, spread] : again.spread) into.spread[table] = spread;
  for (const auto& [element, g] : again.profile.gemm) into.profile.gemm[element] = g;
  for (const auto& [element, a] : again.profile.attention) into.profile.attention[element] = a;
  for (const auto& [family, points] : again.profile.memory) into.profile.memory[family] = points;
}

// The kernels' tables and the calibration, with `collectives` (measured before, or none), checked and
// measured again where they cannot be trusted.
plan::MeasuredProfile measure_kernels(const ProfileArgs& args, const kernels::Ops& ops, const Machine& machine,
                                      std::optional<plan::CollectiveTable> collectives) {
  log::plan().info("profiling {} with the engine's kernels{}", machine.device, args.quick ? " (quick)" : "");
  ProfileOptions options;
  options.quick = args.quick;
  options.fp8 = machine.fp8;
  options.progress = [](const std::string& line) { log::plan().info(line); };
  MeasuredTables measured = measure_profile(ops, options);
  plan::MeasuredProfile& profile = measured.profile;
  profile.device = machine.device;  // before the calibration, which times the job as this GPU
  profile.collectives = std::move(collectives);
  auto calibrate_now = [&] {
    log::plan().info("calibration: training a reference job with the engine");
    profile.calibration = calibrate(ops, profile, args.quick);
    log::plan().info("calibration: {}: {:.4f} s a step, compute {:.2f}x the tables' prediction",
                     profile.calibration->job, profile.calibration->measured_step_s, profile.calibration->compute_scale);
  };
  calibrate_now();
  std::vector<plan::ProfileDoubt> doubts = plan::profile_doubts(profile, measured.spread);
  for (int again = 1; again <= kRemeasures; ++again) {
    std::set<std::string> tables;  // what can be measured again here (the collectives were, by the workers)
    bool calibration = false;
    for (const plan::ProfileDoubt& d : doubts) {
      log::plan().warn("cannot trust {}", d.text());
      if (d.table == "calibration")
        calibration = true;
      else if (d.table.rfind("collectives/", 0) != 0)
        tables.insert(d.table);
    }
    if (tables.empty() && !calibration) break;
    std::string what;
    for (const std::string& table : tables) what += table + ", ";
    log::plan().info("measuring again ({} of {}): {}the calibration", again, kRemeasures, what);
    if (!tables.empty()) {
      options.only = tables;
      take_tables(measured, measure_profile(ops, options), tables);
    }
    calibrate_now();
    doubts = plan::profile_doubts(profile, measured.spread);
  }
  std::string kept;
  for (const plan::ProfileDoubt& d : doubts) {
    profile.doubts.push_back(d.text());
    kept += "\n  " + d.text();
  }
  if (!doubts.empty())
    log::plan().warn("{} of the measurements stay untrustworthy (was the machine busy?): the profile says so, and "
                     "validate repeats it; measure again on an idle machine for step times to trust:{}",
                     doubts.size(), kept);
  profile.versions = machine.versions;
  // The CUDA module names cuDNN's version, and the mode its attention ran under, where cuDNN loaded
  // (kernels/cuda/cuda_ops.cu); elsewhere the attention timed is ptrain's own.
  if (args.backend == "cuda") {
    const auto cudnn = machine.versions.find("cudnn");
    const bool served = cudnn != machine.versions.end() && cudnn->second.find("PTRAIN_CUDNN_ATTENTION=") != std::string::npos;
    profile.cudnn_attention = served ? kernels::cudnn_attention_mode() : kernels::CudnnAttentionMode::Off;
  }
  profile.date = today();
  profile.ptrain_version = kVersion;
  return profile;
}

// One rank of a --nproc run: the collectives, then rank 0 completes the file.
int profile_worker(const ProfileArgs& args, const dist::WorkerEnv& env) {
  if (args.collectives_to.empty() && refuse_out(args)) return kExitBadInput;  // under srun: every rank says it
  Machine machine;
  const kernels::Ops* ops = backend_ops(args, env.local_rank, machine);
  if (ops == nullptr) return kExitBadInput;
  kernels::set_cpu_threads(std::max(1u, std::thread::hardware_concurrency()) / static_cast<unsigned>(env.local_world));
  std::signal(SIGPIPE, SIG_IGN);
  try {
    const std::string identity = dist::text_digest("ptrain profile " + args.backend + (args.quick ? " quick" : ""));
    std::unique_ptr<dist::Session> session =
        dist::rendezvous(env, identity, std::chrono::milliseconds(600'000), nccl_offer(*ops));
    if (env.rank == 0) log::plan().info("measuring collectives over {} ranks ({})", env.world, session->comm().backend());
    plan::CollectiveTable table = measure_collectives(session->comm(), *ops, args.quick);
    session->finish();
    if (env.rank != 0) return kExitOk;
    if (!args.collectives_to.empty())
      return write_output_file(args.collectives_to, plan::to_json(table)) ? kExitOk : kExitRuntimeFailure;
    kernels::set_cpu_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    const plan::MeasuredProfile profile = measure_kernels(args, *ops, machine, std::move(table));
    if (!write_output_file(args.out, plan::to_json(profile))) return kExitRuntimeFailure;
    log::plan().info("wrote {} with collectives over {} ranks", args.out, env.world);
    return kExitOk;
  } catch (const std::exception& e) {
    log::plan().error(e.what());
    return kExitRuntimeFailure;
  }
}

int run_profile(const ProfileArgs& args) {
  std::optional<dist::WorkerEnv> env;
  if (!detect_worker(env)) return kExitBadInput;
  log_as(env, env ? env->world : args.nproc);
  if (env) return profile_worker(args, *env);
  config::Diagnostics environment;
  check_environment(environment);  // the attention it times follows PTRAIN_CUDNN_ATTENTION
  if (!environment.ok()) {
    print_diagnostics(environment);
    return kExitBadInput;
  }
  if (refuse_out(args)) return kExitBadInput;
  if (std::string noise; !profile_noise_table(noise)) return kExitBadInput;
  std::optional<plan::CollectiveTable> collectives;
  if (args.nproc > 1) {  // first, while this process has no threads (see above)
    const std::string part = args.out + ".collectives";
    dist::LaunchOptions launch;
    launch.nproc = args.nproc;
    launch.argv = {self_executable(), "profile", "--backend", args.backend, "--out", args.out, "--collectives-to", part};
    if (args.quick) launch.argv.push_back("--quick");
    try {
      if (const int code = dist::launch_local(launch); code != kExitOk) return code;
      std::ifstream in(part, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      collectives = plan::collectives_from_json(text.str());
    } catch (const std::exception& e) {
      log::plan().error(e.what());
      return kExitRuntimeFailure;
    }
    std::remove(part.c_str());
  }
  Machine machine;
  const kernels::Ops* ops = backend_ops(args, 0, machine);
  if (ops == nullptr) return kExitBadInput;
  plan::MeasuredProfile profile;
  try {
    profile = measure_kernels(args, *ops, machine, std::move(collectives));
  } catch (const std::exception& e) {
    log::plan().error(e.what());
    return kExitRuntimeFailure;
  }
  if (!write_output_file(args.out, plan::to_json(profile))) return kExitRuntimeFailure;
  log::plan().info("wrote {} (use it with cluster.profile: {})", args.out, args.out);
  return kExitOk;
}

}  // namespace

void add_profile_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "profile", "Measure this machine with the engine's kernels and write a hardware profile (cluster.profile)");
  cmd->add_option("--backend", args->backend, "Kernels to measure")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--out", args->out, "Profile file to write (JSON)")->check(non_empty());
  cmd->add_flag("--force", args->force, "Replace --out even if ptrain profile did not write it");
  cmd->add_flag("--quick", args->quick, "Coarser grids and fewer repeats (under a minute on a CPU)");
  cmd->add_option("--nproc", args->nproc, "Also measure the collectives over N local ranks (Gloo, or NCCL on GPUs)")
      ->check(whole_number_in(1, 1024));
  cmd->add_option("--collectives-to", args->collectives_to)->group("");  // the launcher's own workers
  cmd->callback([args, &exit_code] { exit_code = run_profile(*args); });
}

}  // namespace ptrain::app
