// Proves a schedule can run: every (mb, chunk) has exactly one F, B (and W when split) on the
// right rank; every send has its matching recv in the same order on each channel; local order
// respects F -> B -> W; and executing all lists with asynchronous sends and blocking receives
// finishes (no deadlock).
//
// The checks run in this order, each only if the ones before found nothing (a later check would
// only restate an earlier problem):
//  1. fields: microbatch and chunk in range, peers of sends/receives on the neighbouring virtual
//     stages, no messages off either end of the pipeline or for a hop within one rank, W only when
//     the schedule splits it, `overlapped` only on an F;
//  2. per rank, each (mb, chunk) has each op it needs exactly once, RecvAct -> F -> SendAct,
//     RecvGrad -> B -> SendGrad, F -> B -> W in list order, and across a hop within the rank F of
//     the earlier chunk before F of the later, B of the later before B of the earlier; and per
//     channel (sender, receiver, payload) both ends list the same messages in the same order; an F
//     opening an F&B pair has a B as the rank's next compute op;
//  3. execution under the contract in schedule.h: sends buffered, receives block, each F&B pair
//     one step that receives all its inputs before it sends anything; every rank must reach the
//     end of its list.
#pragma once

#include <string>
#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline {

// Empty = the schedule is correct and deadlock-free. Otherwise sentences naming the rank, the
// instruction's 0-based index in that rank's list, and the instruction, e.g. "deadlock: rank 0,
// instruction 3 (RecvGrad(mb 0, chunk 0) from rank 1) waits forever: rank 1 is itself blocked at
// instruction 2 (...)". At most 40 sentences, then one saying how many more there were.
std::vector<std::string> check(const Schedule& schedule);

}  // namespace ptrain::pipeline
