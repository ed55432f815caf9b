// What ZeRO-3 gathers on one rank in one step, replayed as the engine runs it: the model chunks'
// unit announcements (model/transformer.cpp) in the rank's instruction list (pipeline::build),
// through parallel::DataParallel's parameter windows (zero/data_parallel.cpp). A unit is gathered when it is not
// resident in its window (two windows the dense units alternate between, two for the experts' units
// apart; a tied embedding, which the head reuses, keeps one of its own); each forward announcement
// also prefetches the next unit
// (not after the embedding's), each backward announcement the previous one. A step starts with
// every window stale (the update before it changed the parameters). Evaluations are not replayed:
// the windows they leave make the next step gather less.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/pipeline/schedule_model.h"
#include "engine/plan/rank_params.h"

namespace ptrain::plan {

struct Zero3Gathers {
  std::int64_t elements = 0;  // of all gathered dense units (each as the flat buffer pads it)
  std::int64_t calls = 0;     // all-gathers
  std::int64_t expert_elements = 0, expert_calls = 0;  // the same of the experts' units apart
};

// `layout`: the flat layout (model::flat_layout, as count_rank_params cuts it) of pp rank `pp_rank`
// of `schedule` (the job's, which the caller has anyway). The windows after a block of the schedule
// are what the block gathered last, or what they held before it: every block after the first adds
// the same gathers (pipeline::ScheduleModel::count).
Zero3Gathers zero3_gathers(const pipeline::ScheduleModel& schedule, const model::FlatLayout& layout, int pp_rank);

}  // namespace ptrain::plan
