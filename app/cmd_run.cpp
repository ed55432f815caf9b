// `ptrain run job.yaml [--nproc N] [--max-restarts N] [--set key=value ...]`: train.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <utility>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <stop_token>
#include <thread>

#include "app/commands.h"
#include "app/core_sharing.h"
#include "app/exit_codes.h"
#include "app/flag_checks.h"
#include "app/job_identity.h"
#include "app/job_loading.h"
#include "app/machine_fit.h"
#include "app/run_backend.h"
#include "app/run_logs.h"
#include "app/run_preflight.h"
#include "app/run_record.h"
#include "app/run_report.h"
#include "app/run_restarts.h"
#include "app/worker_process.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/comm/session.h"
#include "engine/data/data_error.h"
#include "engine/launch/dist_error.h"
#include "engine/launch/launcher.h"
#include "engine/launch/worker_env.h"
#include "engine/log/log.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/threads.h"
#include "kernels/ops.h"

namespace ptrain::app {
namespace {

struct RunArgs {
  JobArgs job;
  std::optional<int> nproc;
  std::int64_t stop_after_steps = 0;
  int max_restarts = 0;
};

std::atomic<bool> g_stop_requested{false};  // set by SIGINT/SIGTERM/SIGHUP, polled once per step

extern "C" void request_stop(int) { g_stop_requested.store(true); }

// Blocks (SIG_BLOCK) or unblocks (SIG_UNBLOCK) the stop signals in this thread: SIGINT, SIGTERM and
// SIGHUP, which the local launcher forwards as SIGTERM.
void mask_stop_signals(int how) {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  pthread_sigmask(how, &set, nullptr);
}

// OMP_NUM_THREADS, the usual knob: a whole number of threads per rank, up to a bound past any
// machine's cores (OpenMP's runtime crashes on a team of 100,000); nullopt when unset or empty,
// false after saying why when it is anything else.
constexpr int kMaxCpuThreads = 4096;
bool omp_threads(std::optional<int>& threads) {
  const char* text = std::getenv("OMP_NUM_THREADS");
  threads.reset();
  if (text == nullptr || *text == '\0') return true;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || n < 1 || n > kMaxCpuThreads) {
    log::launch().error("OMP_NUM_THREADS must be a whole number of threads per rank in [1, {}], got '{}'",
                        kMaxCpuThreads, text);
    return false;
  }
  threads = static_cast<int>(n);
  return true;
}

// OMP_NUM_THREADS when set (checked by run_training), else the cores this process may use (its CPU
// affinity) shared by this machine's ranks.
int cpu_threads(int local_ranks) {
  std::optional<int> threads;
  if (omp_threads(threads) && threads) return *threads;
  return std::max(1, usable_cores() / std::max(1, local_ranks));
}

// Under mpirun, srun or torchrun a rank's parent is the launcher's daemon or agent: when that goes
// (mpirun killed outright), the rank stops as on SIGTERM, with a checkpoint, rather than train on as
// an orphan that holds checkpoint.dir. A rank started by hand (RANK/WORLD_SIZE without torchrun) is a
// shell's child, and a shell that exits does not stop it (a closed terminal is SIGHUP's to say).
// `parent`: this process's parent when it started; one gone already is a stop now.
void stop_with_parent(const dist::WorkerEnv& env, pid_t parent) {
  const bool under_agent =
      env.launcher == "mpirun" || env.launcher == "srun" || std::getenv("TORCHELASTIC_RUN_ID") != nullptr;
  if (!under_agent || env.launcher == "ptrain") return;  // ptrain's own workers die with it (launcher.cpp)
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) g_stop_requested.store(true);
}

// A rank stopped before its first step: nothing is saved (rank 0 says so), exit 0.
[[noreturn]] void end_before_the_first_step(bool leader) {
  if (leader) log::train().info("stop requested before the first step: nothing to save");
  std::fflush(nullptr);
  ::_exit(0);
}

// The rendezvous waits (for the store, for every rank to join) are not steps and do not poll the
// stop flag: they would keep a stopped rank until comm.timeout_s (ten minutes by default). Nothing
// is saved before the first step, so a stop meanwhile ends the rank at once, exit 0.
class StopDuringRendezvous {
 public:
  explicit StopDuringRendezvous(bool leader)
      : leader_(leader), watcher_([leader](std::stop_token done) {
          while (!done.stop_requested()) {
            if (g_stop_requested.load()) end_before_the_first_step(leader);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  // A rendezvous that failed once a stop was requested failed of the stop (rank 0, stopping, took
  // the store with it before this rank reached it): the stop is what ends the rank.
  void on_failure() const {
    if (g_stop_requested.load()) end_before_the_first_step(leader_);
  }

 private:
  bool leader_;
  std::jthread watcher_;  // stopped and joined when the rendezvous is over
};

// PTRAIN_DEBUG_FAULT="<rank>:<step>:<kill|exit|stall|slow=<ms>>[:<attempts>]": a debug setting for
// fault tests (slow: from that step on the rank computes <ms> longer in every step, a straggler).
// The fault strikes in the first `attempts` attempts of a job that restarts (run_restarts.h; 1 when
// not given), so that a restarted job does not meet it again forever.
bool parse_fault(train::TrainerOptions& options) {
  const char* text = std::getenv("PTRAIN_DEBUG_FAULT");
  if (text == nullptr || *text == '\0') return true;
  int rank = -1, consumed = 0;
  long long step = 0;
  long slow_ms = 0, attempts = 1;
  char action[16] = {};
  const bool parsed = std::sscanf(text, "%d:%lld:%15[a-z]%n", &rank, &step, action, &consumed) == 3;
  const char* rest = parsed ? text + consumed : text;
  char* end = nullptr;
  if (parsed && std::strcmp(action, "slow") == 0 && *rest == '=') {
    slow_ms = std::strtol(rest + 1, &end, 10);
    rest = slow_ms >= 1 && slow_ms <= 600000 ? end : text;
  }
  if (parsed && *rest == ':') {
    attempts = std::strtol(rest + 1, &end, 10);
    rest = end;
  }
  const bool known = std::strcmp(action, "kill") == 0 || std::strcmp(action, "exit") == 0 ||
                     std::strcmp(action, "stall") == 0 || (std::strcmp(action, "slow") == 0 && slow_ms > 0);
  if (!parsed || *rest != '\0' || rank < 0 || step < 1 || attempts < 1 || attempts > 1000000 || !known) {
    log::train().error(
        "PTRAIN_DEBUG_FAULT='{}': expected <rank>:<step>:<kill|exit|stall|slow=<ms>>[:<attempts>] (ms 1-600000)",
        text);
    return false;
  }
  if (restart_attempt() >= attempts) return true;  // a restart past the faulty attempts
  options.fault_rank = rank;
  options.fault_step = step;
  options.fault_action = action;
  options.fault_slow_ms = static_cast<int>(slow_ms);
  return true;
}

// A rank's exit code for `code`: under srun or mpirun (ptrain does not own the processes) a runtime
// failure with restarts left asks the requeue script for one (run_restarts.h); under ptrain's own
// launcher, which restarts by itself, the code as it is.
int failure_exit_code(const dist::WorkerEnv& env, int code, int max_restarts) {
  return env.launcher == "ptrain" ? code : requeue_exit_code(code, max_restarts, restart_attempt());
}

// The local launcher: one worker process per rank, each running this same command.
int launch_workers(const RunArgs& args, const config::JobSpec& spec) {
  dist::LaunchOptions launch;
  launch.nproc = spec.world;
  launch.argv = {self_executable(), "run", args.job.job_path, "--nproc", std::to_string(spec.world)};
  for (const std::string& o : args.job.overrides) launch.argv.insert(launch.argv.end(), {"--set", o});
  if (args.stop_after_steps > 0)
    launch.argv.insert(launch.argv.end(), {"--stop-after-steps", std::to_string(args.stop_after_steps)});
  launch.max_restarts = args.max_restarts;
  launch.resume_note = [&spec] { return resume_note(spec); };
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') launch.master_addr = addr;
  if (const char* port = std::getenv("MASTER_PORT"); port != nullptr && *port != '\0')
    launch.master_port = dist::parse_port("MASTER_PORT", port);  // a LaunchConfigError is exit 2
  return dist::launch_local(launch);
}

// Reports a failure of this worker, through the logger of the subsystem it came from; under a
// launcher, tells the other ranks to stop too.
int fail(dist::Session* session, log::Subsystem from, int code, const std::string& message,
         const std::string& collectives = {}) {
  log::get(from).error(message);
  if (!collectives.empty()) log::comm().error("last collectives of this rank:\n{}", collectives);
  if (session != nullptr) session->report_abort(message);
  return code;
}

// `predicted`: validate's estimate of the job, which rank 0 sets the run's typical step against at
// the end.
// `source`: how the run was started, which its records keep at the segment it begins.
// `record`: what rank 0 does once the trainer holds checkpoint.dir and has resumed (record_run_job):
// a run refused there (another job's directory, another model's checkpoint) leaves the previous
// run's record alone.
int train(const RunArgs& args, const config::JobSpec& spec, const std::optional<dist::WorkerEnv>& env,
          const std::optional<plan::Estimate>& predicted, std::chrono::steady_clock::time_point started,
          pid_t parent, const train::RunSegmentSource& source, const std::function<void()>& record) {
  train::TrainerOptions options;
  options.segment = source;
  if (!parse_fault(options)) return kExitBadInput;
  if (options.fault_rank >= spec.world || options.fault_step > spec.train.steps) {  // it would inject nothing
    log::train().error("PTRAIN_DEBUG_FAULT names rank {}, step {}: the job has ranks 0-{}, steps 1-{}",
                       options.fault_rank, options.fault_step, spec.world - 1, spec.train.steps);
    return kExitBadInput;
  }
  auto lap = [at = started]() mutable {  // seconds since the previous lap
    const auto now = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(now - std::exchange(at, now)).count();
  };
  options.startup.job_s = lap();
  options.stop_requested = &g_stop_requested;
  options.stop_after_steps = args.stop_after_steps;
  std::string why_not;
  const kernels::Ops* ops = select_backend(spec, env ? env->local_rank : 0, why_not);
  if (ops == nullptr) {
    log::kernels().error(why_not);
    return kExitBadInput;
  }
  options.startup.backend_s = lap();
  kernels::set_cpu_threads(cpu_threads(env ? env->local_world : 1));
  // SIGHUP too (a terminal closed on a rank, as the launcher forwards it): a stop with a checkpoint,
  // not death by the default action; unless the rank inherited it ignored (nohup), which stays.
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_IGN && sig == SIGHUP) continue;
    std::signal(sig, request_stop);
  }
  if (env) stop_with_parent(*env, parent);
  mask_stop_signals(SIG_UNBLOCK);  // one that came during start-up is delivered now: a clean stop
  // A peer that dies mid-collective must surface as a failed collective (with its log), not kill
  // this rank with SIGPIPE from inside Gloo's socket writes.
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<dist::Session> session;
  std::unique_ptr<dist::Comm> solo;
  try {
    dist::Comm* comm = nullptr;
    if (env) {
      if (env->rank == 0 && !env->token_from_env)
        log::store().warn("PTRAIN_JOB_TOKEN is not set: the job token is derived from public job ids and keeps "
                          "out mistakes, not attackers");
      const std::chrono::milliseconds timeout(static_cast<std::int64_t>(spec.comm.timeout_s * 1000));
      {
        const StopDuringRendezvous stop(env->rank == 0);
        try {
          session = dist::rendezvous(*env, job_identity(args.job, spec), timeout, nccl_offer(*ops),
                                     failure_exit_code(*env, kExitRuntimeFailure, args.max_restarts));
        } catch (const dist::DistError&) {
          stop.on_failure();
          throw;
        }
      }
      comm = &session->comm();
      options.startup.rendezvous_s = lap();
    } else {
      solo = dist::make_solo_comm();
      comm = solo.get();
    }
    train::Trainer trainer(spec, *ops, *comm, options);
    if (!env || env->rank == 0) record();
    const train::RunResult result = trainer.run();
    if (session) session->finish();
    if ((!env || env->rank == 0) && result.typical_step && predicted) {
      std::fputs(measured_against_predicted(*result.typical_step, *predicted).c_str(), stdout);  // a report
      std::fputs(("  expected error of the step: " + predicted->expected_error + "\n").c_str(), stdout);
    }
    if (result.status == train::RunStatus::NonFinite) {
      log::train().error("loss became NaN/inf at step {}", result.failed_step);
      return kExitRuntimeFailure;
    }
    return kExitOk;
  } catch (const data::DataError& e) {
    return fail(session.get(), log::Subsystem::data, kExitBadInput, std::string("data: ") + e.what());
  } catch (const ckpt::CheckpointError& e) {
    return fail(session.get(), log::Subsystem::ckpt, kExitBadInput, std::string("checkpoint: ") + e.what());
  } catch (const std::invalid_argument& e) {
    return fail(session.get(), log::Subsystem::train, kExitBadInput, e.what());
  } catch (const dist::LaunchConfigError& e) {  // this process does not belong to the store's job
    return fail(session.get(), log::Subsystem::store, kExitBadInput, e.what());
  } catch (const dist::CollectiveError& e) {
    return fail(session.get(), log::Subsystem::comm, kExitRuntimeFailure, e.what(), e.log_dump());
  } catch (const std::exception& e) {
    return fail(session.get(), log::Subsystem::train, kExitRuntimeFailure, e.what(),
                session ? session->comm().log().dump() : std::string());
  }
}

}  // namespace

void hold_stop_signals_for_run(int argc, char** argv) {
  // From here on a stop signal waits instead of killing: the launcher reads it from its signalfd
  // (launch_local); a worker, or a run alone, unblocks it once its handler is installed (train).
  // Workers start with this mask (launch_local hands them the caller's), so a signal that the
  // launcher forwards before a worker has reached its handler waits for it too.
  if (argc > 1 && std::string_view(argv[1]) == "run") mask_stop_signals(SIG_BLOCK);
}

namespace {

// The stop signals are held already (hold_stop_signals_for_run, from main).
int run_training(const RunArgs& args) {
  const auto started = std::chrono::steady_clock::now();
  const pid_t parent = ::getppid();
  std::optional<dist::WorkerEnv> env;
  if (!detect_worker(env)) return kExitBadInput;
  if (env) {
    log_as(env, env->world);
    log::launch().debug("started by {}: rank {} of {}, local rank {} of {}; the store at {}:{}", env->launcher,
                        env->rank, env->world, env->local_rank, env->local_world, env->store_host, env->store_port);
  }
  if (std::optional<int> threads; !omp_threads(threads)) return kExitBadInput;
  if (env && args.nproc && *args.nproc != env->world) {
    log::launch().error("--nproc {}, but the {} launcher started {} ranks", *args.nproc, env->launcher, env->world);
    return kExitBadInput;
  }
  config::LoadResult job = load_job(args.job, env ? std::optional<int>(env->world) : args.nproc);
  if (!env && job.ok()) log_as(env, job.spec.world);  // the local launcher, or the one rank
  // run refuses what validate refuses: beyond the rules, an unknown cluster.gpu or a job whose
  // predicted memory exceeds the device's (the error names the breakdown and the nearest fit); and,
  // before a worker starts, what validate warns this engine does not execute yet.
  std::optional<plan::Estimate> est;
  if (job.ok()) {
    est = estimate_job(job);
    if (est) job.diags.errors.insert(job.diags.errors.end(), est->diags.errors.begin(), est->diags.errors.end());
    for (config::Diagnostic& limit : engine_limit_warnings(job)) job.diags.errors.push_back(std::move(limit));
    for (config::Diagnostic& output : run_output_errors(job)) job.diags.errors.push_back(std::move(output));
    // The files it names, once they are of the right kinds (a FIFO is never read); not again in the
    // workers this process's launcher started, which checked them before starting any.
    if (job.ok() && (!env || env->launcher != "ptrain"))
      for (config::Diagnostic& input : run_input_errors(job, /*records=*/!env))
        job.diags.errors.push_back(std::move(input));
  }
  if (!env || (env->rank == 0 && env->launcher != "ptrain")) {
    log_diagnostics(job.diags);  // once per job
  } else if (!job.ok() && env->launcher == "env") {
    // Ranks started by hand from RANK/WORLD_SIZE may each have their own flags, and their rank 0
    // elsewhere or not at all: one line, so that each still says why it stops. (srun and mpirun
    // start every rank with the same command: rank 0's list is the one.)
    log::train().error("rank {}: {}{}", env->rank, job.diags.errors.front().format(),
                       job.diags.errors.size() > 1 ? " (and more: rank 0 lists every problem)" : "");
  }
  if (!job.ok()) {
    // Under mpirun/srun the first rank to exit may bring the job down: let rank 0 print first.
    if (env && env->rank != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    return kExitBadInput;
  }
  open_run_log(job.spec, env);
  if (!env) {
    // This process starts every rank here, alone or as the local launcher: a job that no rank could
    // run, or more ranks than this machine holds, starts none.
    std::string why_not;
    const std::optional<RunBackend> backend = resolve_backend(job.spec, why_not);
    if (backend && est) why_not = machine_fit_error(*est, *backend, job.spec.world);
    if (!why_not.empty()) {
      log::launch().error(why_not);
      return kExitBadInput;
    }
    // CPU ranks that take turns on too few cores (a GPU rank's threads only issue its work).
    const std::string shared =
        backend->cuda == nullptr ? oversubscription_warning(job.spec.world, cpu_threads(job.spec.world), usable_cores()) : "";
    if (!shared.empty()) log::launch().warn(shared);
  }
  if (!env && (job.spec.world > 1 || args.max_restarts > 0)) {  // restarts need a launcher, even of one rank
    try {
      return launch_workers(args, job.spec);
    } catch (const dist::LaunchConfigError& e) {
      log::launch().error(e.what());
      return kExitBadInput;
    } catch (const dist::DistError& e) {
      log::launch().error(e.what());
      return kExitRuntimeFailure;
    }
  }
  // The ranks it ran on, where --nproc or the launcher gave another count than cluster.*: the
  // recorded job lays out the same grid (nodes of this node's ranks).
  std::vector<std::string> as_run = args.job.overrides;
  const config::ClusterSpec& c = job.spec.cluster;
  const int local = env ? env->local_world : job.spec.world;
  if (static_cast<std::int64_t>(c.nodes) * c.gpus_per_node != job.spec.world && job.spec.world % local == 0)
    as_run.insert(as_run.end(), {"cluster.nodes=" + std::to_string(job.spec.world / local),
                                 "cluster.gpus_per_node=" + std::to_string(local)});
  const train::RunSegmentSource source = run_segment_source(args.job.job_path, as_run);
  const int code = train(args, job.spec, env, est, started, parent, source,
                         [&] { record_run_job(args.job.job_path, as_run, job.spec.logging.metrics, source); });
  return env ? failure_exit_code(*env, code, args.max_restarts) : code;
}

}  // namespace

void add_run_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "run",
      "Train. Alone on a node it spawns one worker per rank (--nproc) and supervises them; under srun,\n"
      "mpirun or torchrun-style RANK/WORLD_SIZE each process is one worker. SIGINT/SIGTERM: every rank\n"
      "checkpoints at the next step boundary, exit 0. A NaN loss exits 1; a failed rank ends the job with 1,\n"
      "or 2 if it failed on bad input.\n\n"
      "Environment: MASTER_ADDR, MASTER_PORT (where rank 0 hosts the rendezvous store; default 127.0.0.1 and\n"
      "a free port locally), PTRAIN_JOB_TOKEN (shared secret every connection to the store must present;\n"
      "random per local launch; a torchrun-style launch must set one, the same on every rank, unless\n"
      "TORCHELASTIC_RUN_ID names the job), OMP_NUM_THREADS (threads per rank, 1-4096; default the\n"
      "cores of the CPU affinity / local ranks; past those cores run warns),\n"
      "PTRAIN_CUDNN_ATTENTION=auto|fast|deterministic|off (BF16 attention on CUDA: cuDNN where it is faster,\n"
      "the default; cuDNN wherever it can; cuDNN's bitwise-repeatable backward; ptrain's own kernels; validate\n"
      "counts its memory), PTRAIN_CPU_ISA=generic|avx2|avx512 (caps the CPU kernels' instruction set),\n"
      "PTRAIN_LOG_LEVEL=LEVEL[,SUBSYSTEM=LEVEL...] (trace, debug, info, warn, error, off; subsystems launch,\n"
      "store, comm, train, ckpt, data, plan, kernels; unset: rank 0's info and the other ranks' warnings on\n"
      "stderr, every rank's info in logs/rank_<R>.log beside logging.metrics),\n"
      "PTRAIN_RESTART_ATTEMPT (which start of a restarted job this is; set by the local launcher, else\n"
      "SLURM_RESTART_COUNT), PTRAIN_DEBUG_FAULT=<rank>:<step>:<kill|exit|stall|slow=<ms>>[:<attempts>] (fault\n"
      "injection for tests, in the first <attempts> attempts, 1 by default; slow: that rank computes <ms> longer\n"
      "in every step from <step> on).");
  add_job_args(*cmd, args->job);
  cmd->add_option("--nproc", args->nproc, "Number of ranks (default: cluster.nodes * gpus_per_node)")
      ->check(whole_number_in(1, 1 << 20));
  cmd->add_option("--max-restarts", args->max_restarts,
                  "After a runtime failure (a rank died, hung past comm.timeout_s, exit 1) start every rank again\n"
                  "from the latest checkpoint, in the same layout, up to N times (never after bad input, exit 2).\n"
                  "Under srun/mpirun such a failure exits 75 while restarts are left, for a requeue script")
      ->check(whole_number_in(0, 1000000));
  cmd->add_option("--stop-after-steps", args->stop_after_steps,
                  "Train this many steps, then checkpoint and exit 0 as on SIGTERM (time-limited allocations)")
      ->check(whole_number_in(1, std::numeric_limits<std::int64_t>::max()));
  cmd->callback([args, &exit_code] { exit_code = run_training(*args); });
}

}  // namespace ptrain::app
