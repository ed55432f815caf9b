// `ptrain run job.yaml [--nproc N] [--set key=value ...]`: train.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <optional>
#include <thread>

#include "app/commands.h"
#include "app/exit_codes.h"
#include "app/job_loading.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/data/data_error.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace ptrain::app {
namespace {

struct RunArgs {
  JobArgs job;
  std::optional<int> nproc;
  std::int64_t stop_after_steps = 0;
};

std::atomic<bool> g_stop_requested{false};  // set by SIGINT/SIGTERM, polled at step boundaries

extern "C" void request_stop(int) { g_stop_requested.store(true); }

// OMP_NUM_THREADS when set (the usual knob), else every core.
int cpu_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int run_training(const RunArgs& args) {
  const config::LoadResult job = load_job(args.job, args.nproc);
  print_diagnostics(job.diags);
  if (!job.ok()) return kExitBadInput;
  const config::JobSpec& spec = job.spec;
  if (spec.world != 1) {
    std::fprintf(stderr,
                 "error: this job has %d ranks; the engine trains on one rank for now (run with --nproc 1, or "
                 "--set parallel.dp=1 with cluster sizes of 1)\n",
                 spec.world);
    return kExitBadInput;
  }
  if (spec.backend == config::Backend::Cuda) {
    std::fprintf(stderr, "error: backend: cuda is not built into this ptrain yet; use backend: cpu or auto\n");
    return kExitBadInput;
  }
  kernels::set_cpu_threads(cpu_threads());

  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  try {
    train::TrainerOptions options;
    options.stop_requested = &g_stop_requested;
    options.stop_after_steps = args.stop_after_steps;
    train::Trainer trainer(spec, kernels::cpu_ops(), options);
    const train::RunResult result = trainer.run();
    switch (result.status) {
      case train::RunStatus::Completed:
      case train::RunStatus::Interrupted:
        return kExitOk;
      case train::RunStatus::NonFinite:
        std::fprintf(stderr, "error: loss became NaN/inf at step %lld\n", static_cast<long long>(result.failed_step));
        return kExitRuntimeFailure;
    }
  } catch (const data::DataError& e) {
    std::fprintf(stderr, "error: data: %s\n", e.what());
    return kExitBadInput;
  } catch (const ckpt::CheckpointError& e) {
    std::fprintf(stderr, "error: checkpoint: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitRuntimeFailure;
  }
  return kExitOk;
}

}  // namespace

void add_run_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "run",
      "Train. Alone on a node it runs one worker per rank; under srun or mpirun each process is one worker.\n"
      "SIGINT/SIGTERM checkpoint at the next step boundary and exit 0; a NaN loss exits 1.");
  add_job_args(*cmd, args->job);
  cmd->add_option("--nproc", args->nproc, "Number of ranks (default: cluster.nodes * gpus_per_node)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--stop-after-steps", args->stop_after_steps,
                  "Train this many steps, then checkpoint and exit 0 as on SIGTERM (time-limited allocations)")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, &exit_code] { exit_code = run_training(*args); });
}

}  // namespace ptrain::app
