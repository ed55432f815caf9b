#include "engine/train/startup.h"

#include <cstdio>

namespace ptrain::train {

std::string startup_line(const StartupTimes& t) {
  char line[512];
  std::snprintf(line, sizeof line,
                "start-up: %.2f s to the end of the first step: job %.2f s, backend %.2f s, rendezvous %.2f s, "
                "allocation %.2f s, weights %.2f s (%s), first step %.2f s",
                t.total_s(), t.job_s, t.backend_s, t.rendezvous_s, t.allocation_s, t.weights_s, t.weights,
                t.first_step_s);
  return line;
}

}  // namespace ptrain::train
