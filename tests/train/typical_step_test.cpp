// The typical step a run reports against validate at its end (engine/train/typical_step.h).
#include "engine/train/typical_step.h"

#include <catch2/catch.hpp>

using ptrain::train::PerAxis;
using ptrain::train::StepMetrics;
using ptrain::train::StepRecord;

namespace {

// `bubble` seconds of the step's pipeline, on pp rank 1 (none where negative).
StepMetrics step(double seconds, double tp = 0, double bubble = -1) {
  StepMetrics m;
  m.step_seconds = seconds;
  m.optimizer_seconds = seconds / 10;
  if (tp > 0) m.comm_seconds = PerAxis{tp, 0, 0, 0, 0};
  if (bubble >= 0) m.pipeline_bubble = ptrain::pipeline::Bubble{1, bubble, bubble / seconds};
  return m;
}

}  // namespace

TEST_CASE("typical step: medians after the run's first two steps") {
  StepRecord record;
  CHECK_FALSE(record.typical().has_value());
  record.add(step(9.0, 4.0, 4.0));  // start-up
  record.add(step(5.0, 4.0, 4.0));  // first touches
  for (const double s : {1.0, 3.0, 2.0}) record.add(step(s, s / 2, s / 4));
  const auto t = record.typical();
  REQUIRE(t.has_value());
  CHECK(t->steps == 3);
  CHECK(t->step_s == 2.0);
  CHECK(t->optimizer_s == 0.2);
  REQUIRE(t->comm_s.has_value());
  CHECK(t->comm_s->tp == 1.0);
  REQUIRE(t->pipeline_bubble.has_value());
  CHECK(t->pipeline_bubble->seconds == 0.5);  // the bubble's seconds, not a share of the step
  CHECK(t->pipeline_bubble->fraction == 0.25);
  CHECK(t->pipeline_bubble->rank == 1);
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
