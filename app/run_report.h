// The end of `ptrain run`: the run's typical step (train/typical_step.h) against validate's
// predicted breakdown of it (plan::Estimate::StepBreakdown), part by part, as a table for the
// terminal. Measured communication is the seconds inside each axis's calls (for blocking host
// collectives what the step waits; on a device backend only the time to issue them).
#pragma once

#include <string>

#include "engine/plan/estimate.h"
#include "engine/train/typical_step.h"

namespace ptrain::app {

std::string measured_against_predicted(const train::TypicalStep& measured, const plan::Estimate& predicted);

}  // namespace ptrain::app
