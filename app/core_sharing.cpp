#include "app/core_sharing.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace ptrain::app {
namespace {

std::string times_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1fx", x);
  return text;
}

std::string count(int n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string oversubscription_warning(int ranks, int threads, int cores) {
  const long long wanted = static_cast<long long>(ranks) * threads;
  if (wanted <= cores) return "";
  std::string fix;
  if (ranks <= cores)
    fix = "OMP_NUM_THREADS=" + std::to_string(cores / ranks) + " (threads per rank), or unset it: ptrain then gives " +
          "each rank cores / ranks threads";
  else
    fix = "start at most " + std::to_string(cores) + " rank(s) here (--nproc " + std::to_string(cores) +
          " with a layout for it), or spread the ranks over machines (srun, mpirun)" +
          (threads > 1 ? "; and OMP_NUM_THREADS=1" : "");
  return count(ranks, "rank") + " x " + count(threads, "thread") + " = " + std::to_string(wanted) +
         " threads on " + count(cores, "core") + " (the CPU affinity `ptrain run` was given): they take turns, so " +
         "every step takes about " + times_text(static_cast<double>(wanted) / cores) +
         " as long as with a core per thread, and the predicted step time does not count that unless cluster.profile " +
         "is a CPU profile of these cores and cluster.gpus_per_node the ranks here (fix: " + fix + ")";
}

std::optional<config::Diagnostic> node_oversubscription(const config::LoadResult& job, const plan::HardwareProfile& hw) {
  if (!hw.device_is_host()) return std::nullopt;
  const config::JobSpec& spec = job.spec;
  const int ranks = std::max(1, std::min(spec.world, spec.cluster.gpus_per_node));
  const bool profiled = hw.measured && hw.measured->backend == "cpu";
  const int cores = profiled ? hw.measured->cores : usable_cores();
  if (ranks <= cores) return std::nullopt;
  const std::string x = times_text(static_cast<double>(ranks) / cores);
  char per_core[32];
  std::snprintf(per_core, sizeof per_core, "%.1f threads", static_cast<double>(ranks) / cores);
  return job.at("cluster.gpus_per_node",
                std::to_string(ranks) + " CPU ranks on a node of " + count(cores, "core") +
                    (profiled ? " (as cluster.profile measured it)" : " (this machine's: no cluster.profile)") +
                    ": `ptrain run` gives each one thread, " + std::string(per_core) + " to a core, so each rank computes about " + x +
                    " slower than on a core of its own" +
                    (profiled ? " (the step time above counts it)"
                              : "; the step time above does not count it (peak x 60% gives every rank the whole peak)"),
                "at most " + std::to_string(cores) + " ranks per node: cluster.gpus_per_node: " + std::to_string(cores) +
                    " with more cluster.nodes, or fewer ranks" +
                    (profiled ? "" : "; with this machine's `ptrain profile` as cluster.profile the step time counts the sharing"));
}

}  // namespace ptrain::app
