// The end of `ptrain run`: the run's typical step (train/typical_step.h) against validate's
// predicted breakdown of it (plan::Estimate::StepBreakdown), part by part, as a table for the
// terminal. Measured communication is the seconds inside each axis's calls (for blocking host
// collectives what the step waits; on a device backend only the time to issue them) and compute the
// time outside them, each on the rank with the most of it, so the measured rows need not add up to
// the step as the predicted ones do.
#pragma once

#include <string>

#include "engine/plan/estimate.h"
#include "engine/train/typical_step.h"

namespace ptrain::app {

std::string measured_against_predicted(const train::TypicalStep& measured, const plan::Estimate& predicted);

}  // namespace ptrain::app
