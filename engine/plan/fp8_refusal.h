// Whether `ptrain run` would execute a job in train.precision: fp8, as one question that `plan`'s
// search asks of every layout before it tries fp8 beside bf16 (search.h). It asks the very checks
// that refuse such a job, and holds none of its own:
//   - the device: FP8 tensor cores (HardwareProfile::runs_fp8; validate and run refuse a GPU without
//     them at train.precision, app/job_loading.cpp);
//   - what this build's engine executes (config::engine_limits): a limit the job has under fp8 and
//     not under bf16 (today: a backend other than cpu, ep groups across tp or cp);
//   - on a GPU (backend: cuda, or auto with a GPU as cluster.gpu), the shapes cuBLASLt's FP8 GEMMs
//     take (config::fp8_shape_refusal), which validate refuses for backend: cuda and run once
//     backend: auto resolves to a GPU.
// So lifting a limit there makes plan try fp8 where it is lifted, with no change here.
#pragma once

#include <optional>

#include "engine/config/engine_limits.h"
#include "engine/config/job_spec.h"
#include "engine/plan/hardware.h"

namespace ptrain::plan {

// The first reason `spec` would not run in fp8 on `hw` (its own train.precision is ignored: asked
// as fp8), with its key and fix; nullopt where it would. `spec`: derived (a rule-abiding layout).
std::optional<config::EngineLimit> fp8_refusal(const config::JobSpec& spec, const HardwareProfile& hw);

}  // namespace ptrain::plan
