// The typical step a run reports against validate at its end (engine/train/typical_step.h).
#include "engine/train/typical_step.h"

#include <catch2/catch.hpp>

using ptrain::train::PerAxis;
using ptrain::train::StepMetrics;
using ptrain::train::StepRecord;

namespace {

StepMetrics step(double seconds, double tp = 0, double idle = -1) {
  StepMetrics m;
  m.step_seconds = seconds;
  m.optimizer_seconds = seconds / 10;
  if (tp > 0) m.comm_seconds = PerAxis{tp, 0, 0, 0, 0};
  if (idle >= 0) m.pipeline_idle = idle;
  return m;
}

}  // namespace

TEST_CASE("typical step: medians after the run's first two steps") {
  StepRecord record;
  CHECK_FALSE(record.typical().has_value());
  record.add(step(9.0, 4.0, 0.5));  // start-up
  record.add(step(5.0, 4.0, 0.5));  // first touches
  for (const double s : {1.0, 3.0, 2.0}) record.add(step(s, s / 2, 0.25));
  const auto t = record.typical();
  REQUIRE(t.has_value());
  CHECK(t->steps == 3);
  CHECK(t->step_s == 2.0);
  CHECK(t->optimizer_s == 0.2);
  REQUIRE(t->comm_s.has_value());
  CHECK(t->comm_s->tp == 1.0);
  REQUIRE(t->pipeline_idle_s.has_value());
  CHECK(t->pipeline_idle_s == 0.5);  // a quarter of the 2-second step
}

TEST_CASE("typical step: a run of two steps or fewer takes them all, a long one its last steps") {
  StepRecord short_run;
  short_run.add(step(4.0));
  short_run.add(step(2.0));
  CHECK(short_run.typical()->steps == 2);
  CHECK_FALSE(short_run.typical()->comm_s.has_value());
  StepRecord long_run;
  for (std::size_t i = 0; i < StepRecord::kKept + 50; ++i) long_run.add(step(i < 100 ? 100.0 : 1.0));
  CHECK(long_run.typical()->steps == static_cast<int>(StepRecord::kKept));
  CHECK(long_run.typical()->step_s == 1.0);
}
