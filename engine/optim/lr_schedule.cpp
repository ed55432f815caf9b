#include "engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ptrain::optim {

double learning_rate(const config::OptimizerSpec& opt, std::int64_t total_steps, std::int64_t step) {
  if (step < opt.warmup_steps) return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup_steps);
  const auto progress = [](std::int64_t done, std::int64_t span) {
    return span <= 0 ? 1.0 : std::clamp(static_cast<double>(done) / static_cast<double>(span), 0.0, 1.0);
  };
  const std::int64_t after_warmup = step - opt.warmup_steps;
  const std::int64_t decay_span = total_steps - 1 - opt.warmup_steps;
  switch (opt.decay) {
    case config::LrDecay::Constant:
      return opt.lr;
    case config::LrDecay::Linear:
      return opt.lr - (opt.lr - opt.min_lr) * progress(after_warmup, decay_span);
    case config::LrDecay::Cosine:
      return opt.min_lr +
             (opt.lr - opt.min_lr) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress(after_warmup, decay_span)));
    case config::LrDecay::Wsd: {
      const std::int64_t decay_steps = opt.decay_steps > 0 ? opt.decay_steps : std::max<std::int64_t>(total_steps / 10, 1);
      const std::int64_t decay_start = total_steps - decay_steps;
      if (step < decay_start) return opt.lr;
      return opt.lr - (opt.lr - opt.min_lr) * progress(step - decay_start + 1, decay_steps);
    }
  }
  return opt.lr;
}

}  // namespace ptrain::optim
