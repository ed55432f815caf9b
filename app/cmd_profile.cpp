// `ptrain profile [--backend cpu|cuda] [--quick] [--out FILE]`: measures this machine with the
// engine's own kernels (app/profile_runs.h) and writes a hardware profile (plan/measured_profile.h)
// that `validate`, `plan` and `schedule` time compute from when a job names it in cluster.profile.
#include <cstdio>
#include <ctime>
#include <memory>
#include <fstream>
#include <string>
#include <thread>

#include "app/commands.h"
#include "app/exit_codes.h"
#include "app/profile_runs.h"
#ifdef PTRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ptrain::app {
namespace {

struct ProfileArgs {
  std::string backend = "cpu";
  std::string out = "profile.json";
  bool quick = false;
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

int run_profile(const ProfileArgs& args) {
  const kernels::Ops* ops = &kernels::cpu_ops();
  std::string device = cpu_name() + " (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
  if (args.backend == "cuda") {
#ifdef PTRAIN_HAVE_CUDA
    if (!kernels::cuda_device_available()) {
      std::fprintf(stderr, "error: --backend cuda, but no CUDA device is visible\n");
      return kExitBadInput;
    }
    kernels::cuda_select_device(0);
    ops = &kernels::cuda_ops();
    device = "cuda device 0";
#else
    std::fprintf(stderr, "error: --backend cuda, but this ptrain was built without CUDA\n");
    return kExitBadInput;
#endif
  }
  std::ofstream probe(args.out, std::ios::app);
  if (!probe) {
    std::fprintf(stderr, "error: cannot write %s\n", args.out.c_str());
    return kExitBadInput;
  }
  probe.close();
  std::fprintf(stderr, "profiling %s with the engine's kernels%s\n", device.c_str(), args.quick ? " (quick)" : "");
  ProfileOptions options;
  options.quick = args.quick;
  options.progress = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
  plan::MeasuredProfile profile = measure_profile(*ops, options);
  profile.device = device;
  profile.date = today();
  profile.ptrain_version = kVersion;
  std::ofstream out(args.out, std::ios::binary | std::ios::trunc);
  out << plan::to_json(profile);
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: cannot write %s\n", args.out.c_str());
    return kExitRuntimeFailure;
  }
  std::fprintf(stderr, "wrote %s (use it with cluster.profile: %s)\n", args.out.c_str(), args.out.c_str());
  return kExitOk;
}

}  // namespace

void add_profile_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "profile", "Measure this machine with the engine's kernels and write a hardware profile (cluster.profile)");
  cmd->add_option("--backend", args->backend, "Kernels to measure")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--out", args->out, "Profile file to write (JSON)");
  cmd->add_flag("--quick", args->quick, "Coarser grids and fewer repeats (under a minute on a CPU)");
  cmd->callback([args, &exit_code] { exit_code = run_profile(*args); });
}

}  // namespace ptrain::app
