// What ZeRO-3 gathers on one rank in one step, replayed as the engine runs it: the model chunks'
// unit announcements (model/transformer.cpp) in the rank's instruction list (pipeline::build),
// through ZeroOptimizer's parameter windows (optim/zero.cpp). A unit is gathered when it is not
// resident in its window (two windows alternating by unit parity; a tied embedding, which the
// head reuses, keeps a third of its own); each forward announcement also prefetches the next unit
// (not after the embedding's), each backward announcement the previous one. A step starts with
// every window stale (the update before it changed the parameters). Evaluations are not replayed:
// the windows they leave make the next step gather less.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/param_registry.h"

namespace ptrain::plan {

struct Zero3Gathers {
  std::int64_t elements = 0;  // of all gathered units (each as the flat buffer pads it)
  std::int64_t calls = 0;     // all-gathers
};

// `local`: local_params(...) of pp rank `pp_rank`; `unit_multiple`: the padding of a unit
// (kFlatAlignment * the ZeRO ranks).
Zero3Gathers zero3_gathers(const config::JobSpec& spec, const std::vector<model::LocalParam>& local,
                           int pp_rank, std::int64_t unit_multiple);

}  // namespace ptrain::plan
