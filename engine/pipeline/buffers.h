// What one rank's executor holds while it runs its list: activation slots per model chunk, and
// buffers for the messages it sends.
//
// A chunk keeps a microbatch's activations from its F until its B (until its W when the schedule
// splits weight gradients), so it needs as many slots as its list ever has microbatches between the
// two. Under a cap on the microbatches in flight (Schedule::max_in_flight) the rank's chunks share
// one set of slots instead, as many as the list ever has (chunk, microbatch) pairs between the two:
// the cap bounds their sum, not what each chunk holds at its own peak.
//
// Sends are left in flight (schedule.h's contract), so a send buffer can be reused only once its
// send is known to be over: a send from rank r to rank p is over once r has received a message
// sent after p's receive of it, by p or by any rank that learnt of it through a chain of messages
// (vector clocks; p's receive returns only once the data is there, and every rank runs its list in
// order). Where no such receive follows, the send is waited for at the end of the step. This
// holds for transports whose receive completes the transfer (Gloo); a device transport that only
// enqueues the receive would need its stream order instead.
//
// Pure, like the rest of pipeline/: the executor allocates and frees by these numbers, and validate
// counts the same buffers.
#pragma once

#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline {

struct RankBuffers {
  std::vector<int> activation_slots;  // per chunk
  // For the send at index i of the rank's list: the index of the receive after which the send is
  // over, or the list's size (the end of the step); -1 for other instructions.
  std::vector<int> send_released_after;
  int send_buffers = 0;  // the most sends not known to be over at any one time
  bool split_weight_grad = false;  // the slots also hold what B keeps for W (Schedule::split_weight_grad)
  // > 0 under Schedule::max_in_flight: the slots all the rank's chunks draw from (activation_slots
  // then says what each chunk holds at most).
  int shared_slots = 0;
};

// The slots rank `rank`'s list needs: for each chunk, the most microbatches the chunk holds at once
// (from its F, or across a hop within the rank from the earlier chunk's F, until the op that writes
// the microbatch's gradients), and the most (chunk, microbatch) pairs the rank holds together.
struct SlotCounts {
  std::vector<int> per_chunk;
  int together = 0;
};
SlotCounts slot_counts(const Schedule& schedule, int rank);

// Per pp rank. Precondition: check(schedule) is empty.
std::vector<RankBuffers> rank_buffers(const Schedule& schedule);

}  // namespace ptrain::pipeline
