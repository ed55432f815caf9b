// Whether this machine holds the ranks `ptrain run` starts on it itself (alone, or its local
// launcher's workers), by validate's estimate of the job, checked before any starts: validate
// checks a rank against cluster.gpu, not how many of them share what this machine has.
// On the CPU the ranks share the host: the most one holds (offloaded state too) times the ranks,
// against MemTotal of /proc/meminfo (no check where that cannot be read). On CUDA they take the
// visible devices in turn: the ranks that share one device, against cluster.gpu's memory.
#pragma once

#include <optional>
#include <string>

#include "app/run_backend.h"
#include "engine/plan/estimate.h"

namespace ptrain::app {

// "" when `ranks` ranks of the job `est` estimates fit here on `backend`, else the error with its fix.
std::string machine_fit_error(const plan::Estimate& est, const RunBackend& backend, int ranks);

// MemTotal of `meminfo` (/proc/meminfo's format) in bytes; nullopt where it cannot be read.
std::optional<double> host_memory_bytes(const std::string& meminfo = "/proc/meminfo");

}  // namespace ptrain::app
