#include <catch2/catch.hpp>
#include <cmath>

#include "engine/optim/lr_schedule.h"

using ptrain::config::LrDecay;
using ptrain::config::OptimizerSpec;
using ptrain::optim::learning_rate;

namespace {
OptimizerSpec spec(LrDecay decay) {
  OptimizerSpec o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.decay = decay;
  return o;
}
}  // namespace

TEST_CASE("warmup rises linearly to lr") {
  const OptimizerSpec o = spec(LrDecay::Cosine);
  CHECK(learning_rate(o, 110, 0) == Approx(0.1));
  CHECK(learning_rate(o, 110, 4) == Approx(0.5));
  CHECK(learning_rate(o, 110, 9) == Approx(1.0));
}

TEST_CASE("cosine decays from lr to min_lr over the steps after warmup") {
  const OptimizerSpec o = spec(LrDecay::Cosine);
  CHECK(learning_rate(o, 111, 10) == Approx(1.0));
  CHECK(learning_rate(o, 111, 60) == Approx(0.55));  // halfway: (lr + min_lr) / 2
  CHECK(learning_rate(o, 111, 110) == Approx(0.1));
}

TEST_CASE("linear, constant and wsd") {
  CHECK(learning_rate(spec(LrDecay::Linear), 111, 60) == Approx(0.55));
  CHECK(learning_rate(spec(LrDecay::Linear), 111, 110) == Approx(0.1));
  CHECK(learning_rate(spec(LrDecay::Constant), 111, 100) == Approx(1.0));
  OptimizerSpec wsd = spec(LrDecay::Wsd);
  wsd.decay_steps = 20;  // steps 80..99 decay
  CHECK(learning_rate(wsd, 100, 50) == Approx(1.0));
  CHECK(learning_rate(wsd, 100, 79) == Approx(1.0));
  CHECK(learning_rate(wsd, 100, 89) == Approx(1.0 - 0.9 * 10.0 / 20.0));
  CHECK(learning_rate(wsd, 100, 99) == Approx(0.1));
  wsd.decay_steps = 0;  // default: the last 10%
  CHECK(learning_rate(wsd, 100, 89) == Approx(1.0));
  CHECK(learning_rate(wsd, 100, 99) == Approx(0.1));
}
