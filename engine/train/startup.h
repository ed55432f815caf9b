// Where a run's start-up goes, to the end of its first step: rank 0 prints it after that step, so a
// user waiting for a big model sees what the wait was (and a slow phase has a name).
#pragma once

#include <string>

namespace ptrain::train {

struct StartupTimes {
  double job_s = 0;         // reading and checking the job, validate's estimate of it
  double backend_s = 0;     // opening the compute backend (on CUDA: the module and the context)
  double rendezvous_s = 0;  // meeting the other ranks and connecting the communicators
  double allocation_s = 0;  // parameters, gradients, optimizer state, ZeRO and pipeline buffers
  double weights_s = 0;     // the initial weights
  const char* weights = "drawn from the seed";  // or "read from a checkpoint", "read from HF weights"
  double first_step_s = 0;
  double total_s() const { return job_s + backend_s + rendezvous_s + allocation_s + weights_s + first_step_s; }
};

// "start-up: 12.3 s to the end of the first step: job 0.05 s, backend 0.81 s, ..."
std::string startup_line(const StartupTimes& t);

}  // namespace ptrain::train
