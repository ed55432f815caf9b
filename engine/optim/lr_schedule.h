// Learning rate per step (0-based): linear warmup from lr/warmup to lr over warmup_steps, then
//   cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2
//   linear:   lr - (lr - min_lr) * p
//   constant: lr
//   wsd:      lr until the last decay_steps steps (default 10% of steps), then linear to min_lr
// where p in [0, 1] is the progress through the steps after warmup.
#pragma once

#include <cstdint>

#include "engine/config/job_spec.h"

namespace ptrain::optim {

double learning_rate(const config::OptimizerSpec& opt, std::int64_t total_steps, std::int64_t step);

}  // namespace ptrain::optim
