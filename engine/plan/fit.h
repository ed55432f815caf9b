// The nearest layout that fits in device memory, for the over-memory error. Neighbours of the job
// change, in this order of preference: parallel.zero (higher stage), schedule.max_in_flight (1f1b
// and interleaved-1f1b with pp > 1: 3/4, then 1/2 of what the schedule holds at most, then the
// least it may be), train.recompute (selective, then full), parallel.tp (x2, x4, ... within a
// node), parallel.pp (x2, x4, ...; a cap below the least the larger pp allows is raised to it),
// train.micro_batch (/2, /4, ...). Candidates are tried by the fewest keys changed, then the
// smallest steps, then that order; dp follows from the world size. The first whose peak memory
// fits is returned.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/config/loader.h"
#include "engine/model/param_registry.h"
#include "engine/plan/hardware.h"
#include "engine/plan/memory.h"
#include "engine/plan/rank_params.h"

namespace ptrain::plan {

struct PeakMemory {
  MemoryBreakdown memory;  // of the rank with the most
  int pp_rank = 0;
};

// Peak over the pipeline stages of a loaded (or derived) job; `registry` is build_registry(spec.model).
// Models the schedule for what each rank holds (pipeline::ScheduleModel::held).
PeakMemory peak_memory(const config::JobSpec& spec, const std::vector<model::ParamInfo>& registry);
// The elements a rank of each pipeline stage holds (tp and ep rank 0), which the ZeRO stage and
// recompute do not change; `schedule` is the layout's.
std::vector<RankParams> stage_params(const config::JobSpec& spec, const pipeline::ScheduleModel& schedule,
                                     const std::vector<model::ParamInfo>& registry);
// schedule.max_in_flight values below what a 1f1b or interleaved-1f1b schedule holds at most
// (`held`, what its ranks hold), largest first: 3/4 and 1/2 of it, and the least the cap may
// be (config::least_in_flight). Empty for other kinds and pp 1.
std::vector<int> smaller_in_flight_caps(const config::JobSpec& spec, const std::vector<pipeline::RankBuffers>& held);
// The same peak from those and what each pp rank holds (pipeline::ScheduleModel::held).
PeakMemory peak_memory(const config::JobSpec& spec, const std::vector<RankParams>& stage_params,
                       const std::vector<pipeline::RankBuffers>& held);

struct FittingLayout {
  std::vector<std::pair<std::string, std::string>>
      changes;  // key, value (parallel.dp added when it is explicit)
  PeakMemory peak;
  std::string set_line() const;  // "--set parallel.zero=3 --set train.recompute=full"
};

// `job`: loaded without errors. Each neighbour is derived from it by config::rederive.
std::optional<FittingLayout> nearest_fitting_layout(const config::LoadResult& job, const HardwareProfile& hw);

}  // namespace ptrain::plan
