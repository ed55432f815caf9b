#include "engine/train/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "engine/log/log.h"

namespace ptrain::train {

void inject_fault(const TrainerOptions& options, int rank, std::int64_t next_step) {
  if (options.fault_rank != rank || options.fault_step != next_step) return;
  if (options.fault_action == "slow") {
    ::ptrain::log::train().warn("debug fault: rank {} computes {} ms longer in every step from step {} on", rank,
                                options.fault_slow_ms, next_step);
    return;
  }
  ::ptrain::log::train().warn("debug fault: rank {} runs '{}' before step {}", rank, options.fault_action,
                              next_step);
  if (options.fault_action == "kill") ::kill(::getpid(), SIGKILL);
  if (options.fault_action == "exit") std::_Exit(3);
  if (options.fault_action == "stall")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void slow_down(const TrainerOptions& options, int rank, std::int64_t step) {
  if (options.fault_action != "slow" || options.fault_rank != rank || step < options.fault_step) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(options.fault_slow_ms));
}

}  // namespace ptrain::train
