// Internal to engine/pipeline: where an F&B pair (schedule.h) lies in a rank's list. The checker
// and the simulator both run a pair as one step: its receives first, then its compute, then its
// sends.
#pragma once

#include <cassert>
#include <cstddef>
#include <optional>
#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline::detail {

// A pair's instructions [begin, end) in the list: from its F's RecvAct (when right before the F)
// through its B's SendGrad and, when it follows at once, that B's W.
struct PairExtent {
  std::size_t begin = 0, end = 0;
  std::size_t forward = 0, backward = 0;  // indices of the pair's F and B
};

// The pair whose first instruction is list[at], if one starts there. Precondition: every F with
// `overlapped` set has a B as the next compute op of the list (what check() verifies first).
inline std::optional<PairExtent> pair_at(const std::vector<Instr>& list, std::size_t at) {
  std::size_t f = at;
  if (list[at].op == Op::RecvAct && at + 1 < list.size() && list[at + 1].op == Op::Forward &&
      list[at + 1].microbatch == list[at].microbatch && list[at + 1].chunk == list[at].chunk)
    f = at + 1;
  if (list[f].op != Op::Forward || !list[f].overlapped) return std::nullopt;
  PairExtent pair{at, f + 1, f, f};
  std::size_t b = f + 1;
  while (b < list.size() && !is_compute(list[b].op)) ++b;
  assert(b < list.size() && list[b].op == Op::Backward);
  pair.backward = b;
  pair.end = b + 1;
  auto next_is = [&](Op op) {
    return pair.end < list.size() && list[pair.end].op == op &&
           list[pair.end].microbatch == list[b].microbatch && list[pair.end].chunk == list[b].chunk;
  };
  if (next_is(Op::SendGrad)) ++pair.end;
  if (next_is(Op::WeightGrad)) ++pair.end;
  return pair;
}

}  // namespace ptrain::pipeline::detail
