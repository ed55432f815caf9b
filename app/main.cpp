// ptrain: train transformers from a YAML job spec across TP x PP x DP x CP x EP.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>

#include "app/command_usage.h"
#include "app/commands.h"
#include "app/exit_codes.h"
#include "engine/io/standard_streams.h"
#include "engine/log/log.h"
#include "kernels/backend_module.h"
#include "kernels/cuda_backend.h"

namespace {

// --version: the version and the backends this build has, the CUDA module opened to say whether it
// loads here (the one command that loads it without a job asking for the device).
std::string version_text() {
  std::string text = std::string(ptrain::app::kVersion) + "\nbackends: cpu (built in)";
  const ptrain::kernels::ModuleStatus cuda = ptrain::kernels::cuda_module_status();
  if (!cuda.built) return text + "; cuda: " + cuda.detail;
  if (!cuda.loaded) return text + "; cuda: does not load: " + cuda.detail;
  const bool nccl = ptrain::kernels::cuda_module_symbol("ptrain_nccl_backend") != nullptr;
  using CudnnVersion = std::size_t (*)();
  const auto cudnn =
      reinterpret_cast<CudnnVersion>(ptrain::kernels::cuda_module_symbol("ptrain_cudnn_version"));
  const std::size_t dnn = cudnn != nullptr ? cudnn() : 0;
  const std::string with_cudnn = dnn > 0 ? "with cuDNN " + std::to_string(dnn / 10000) + "." +
                                               std::to_string(dnn / 100 % 100) + "." +
                                               std::to_string(dnn % 100) + " (BF16 attention)"
                                         : "without cuDNN (attention on ptrain's kernels)";
  const bool device = ptrain::kernels::cuda_backend()->device_available();
  return text + "; cuda: " + cuda.detail + " loads, " + (nccl ? "with" : "without") + " NCCL, " + with_cudnn +
         ", " + (device ? "a device is visible" : "no device visible");
}

}  // namespace

int main(int argc, char** argv) {
  ptrain::app::hold_stop_signals_for_run(argc, argv);
  ptrain::io::ensure_stdio_open();  // before anything opens a file, which could take descriptor 2
  try {
    ptrain::log::set_levels(ptrain::log::levels_from_env());
  } catch (const ptrain::log::LevelError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return ptrain::app::kExitBadInput;
  }
  CLI::App cli{
      "ptrain: trains decoder-only transformers (GPT-2, Llama, Mixtral-style MoE) from a YAML job spec\n"
      "across tensor, pipeline, data, context and expert parallelism with ZeRO sharding.\n\n"
      "Exit codes: 0 ok, 1 runtime failure, 2 bad input (config, files, flags)."};
  cli.require_subcommand(1);
  cli.set_version_flag("--version", std::function<std::string()>(version_text));

  int exit_code = ptrain::app::kExitOk;
  ptrain::app::add_run_command(cli, exit_code);
  ptrain::app::add_validate_command(cli, exit_code);
  ptrain::app::add_plan_command(cli, exit_code);
  ptrain::app::add_schedule_command(cli, exit_code);
  ptrain::app::add_convert_command(cli, exit_code);
  ptrain::app::add_profile_command(cli, exit_code);
  ptrain::app::add_report_command(cli, exit_code);

  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; anything else is a bad flag: exit 2.
    // Without a command (bare, misspelt): the commands, and the nearest to a misspelt one.
    if (e.get_exit_code() != 0 && cli.get_subcommands().empty())
      return ptrain::app::report_no_command(cli, e, argc, argv);
    const int printed = cli.exit(e);
    return printed == 0 ? ptrain::app::kExitOk : ptrain::app::kExitBadInput;
  } catch (const std::exception& e) {
    // Every command reports its own failures; one that escapes is a bug, which still ends with a
    // message and exit 1 rather than an abort.
    std::fprintf(stderr, "error: internal error (please report it): %s\n", e.what());
    return ptrain::app::kExitRuntimeFailure;
  }
  return exit_code;
}
