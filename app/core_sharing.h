// CPU ranks and their threads against the cores they share. More threads than cores take turns:
// every step takes about (ranks x threads) / cores times as long as with a core per thread, which
// a step-time prediction counts only where it is told how many ranks share which cores. `ptrain
// run` warns before its ranks start (the local launcher, or a run of one rank) where this machine's
// ranks x threads per rank exceed the cores it may use; validate warns where a CPU job puts more
// ranks on a node than the node has cores.
#pragma once

#include <optional>
#include <string>

#include "engine/config/diagnostics.h"
#include "engine/config/loader.h"
#include "engine/plan/hardware.h"

namespace ptrain::app {

// The cores this process may run on: its CPU affinity (sched_getaffinity, which taskset, a cgroup's
// cpuset and srun's binding narrow), else the machine's.
int usable_cores();

// "" where `ranks` CPU ranks of `threads` threads each fit `cores`; else the run's warning: ranks,
// threads, cores, the slowdown they cost, and the fix (fewer threads per rank through
// OMP_NUM_THREADS, or fewer ranks here).
std::string oversubscription_warning(int ranks, int threads, int cores);

// validate's warning at cluster.gpus_per_node where the CPU job of `job`, timed with `hw`, puts more
// ranks on a node (gpus_per_node, at most the world) than its cores: those its CPU profile
// measured (cluster.profile; the step time counts the sharing then), else this machine's (it does
// not: peak x 60% gives every rank the whole peak). `ptrain run` gives each rank one thread then.
// nullopt where they fit, or the job computes on GPUs.
std::optional<config::Diagnostic> node_oversubscription(const config::LoadResult& job, const plan::HardwareProfile& hw);

}  // namespace ptrain::app
