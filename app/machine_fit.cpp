#include "app/machine_fit.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "app/validate_report.h"

namespace ptrain::app {
namespace {

// How to start fewer ranks here, for either message.
std::string fewer_ranks(int fitting, const char* where) {
  const std::string how =
      "spread the ranks over machines (srun, mpirun), or use a smaller layout (a higher "
      "parallel.zero, train.recompute, a smaller train.micro_batch)";
  if (fitting < 1) return "not one rank fits " + std::string(where) + ": " + how;
  return "at most " + std::to_string(fitting) + " fit " + where + ": start fewer here (--nproc " +
         std::to_string(fitting) + " with a layout for it), " + how;
}

}  // namespace

std::optional<double> host_memory_bytes(const std::string& meminfo) {
  std::ifstream in(meminfo);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name, unit;
    double amount = 0;
    if (fields >> name >> amount >> unit && name == "MemTotal:" && unit == "kB" && amount > 0)
      return amount * 1024;
  }
  return std::nullopt;
}

std::string machine_fit_error(const plan::Estimate& est, const RunBackend& backend, int ranks) {
  if (backend.cuda == nullptr) {
    const std::optional<double> host = host_memory_bytes();
    double most = 0;  // all a rank keeps is in the host's memory, offloaded state and async checkpoint copy too
    for (const plan::RankEstimate& r : est.ranks) most = std::max(most, r.memory.total() + r.memory.host_total());
    if (!host || most * ranks <= *host) return "";
    return "the " + std::to_string(ranks) + " rank(s) `ptrain run` would start on this machine need " +
           bytes_text(most) + " each (predicted, the most of any rank), " + bytes_text(most * ranks) +
           " together, more than its " + bytes_text(*host) +
           " (MemTotal in /proc/meminfo) (fix: " + fewer_ranks(static_cast<int>(*host / most), "here") + ")";
  }
  // Ranks take the devices in turn (select_backend): the first devices get one more.
  const int sharing = (ranks + std::max(1, backend.devices) - 1) / std::max(1, backend.devices);
  const double most = est.peak_memory_bytes();
  if (sharing <= 1 || most * sharing <= est.device_memory_bytes) return "";
  return "the " + std::to_string(ranks) + " ranks `ptrain run` would start on this machine take its " +
         std::to_string(backend.devices) + " CUDA device(s) in turn, " + std::to_string(sharing) +
         " on one: " + std::to_string(sharing) + " x " + bytes_text(most) +
         " (predicted, the most of any rank) = " + bytes_text(most * sharing) + ", more than the " +
         bytes_text(est.device_memory_bytes) + " of " + est.hardware + " (cluster.gpu) (fix: " +
         fewer_ranks(static_cast<int>(est.device_memory_bytes / most), "on a device") + ")";
}

}  // namespace ptrain::app
