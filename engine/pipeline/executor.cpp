#include "engine/pipeline/executor.h"

#include <stdexcept>
#include <utility>

namespace ptrain::pipeline {
namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

// The executor receives into and sends from buffers that live only between a message and its
// compute op: every RecvAct must come right before its F, SendAct right after it, RecvGrad right
// before its B and SendGrad right after it (what pipeline::build produces).
void check_messages_beside_compute(const std::vector<Instr>& list) {
  auto is = [&](std::size_t i, Op op, const Instr& like) {
    return i < list.size() && list[i].op == op && list[i].microbatch == like.microbatch &&
           list[i].chunk == like.chunk;
  };
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Instr& in = list[i];
    const bool ok = (in.op == Op::RecvAct && is(i + 1, Op::Forward, in)) ||
                    (in.op == Op::SendAct && i > 0 && is(i - 1, Op::Forward, in)) ||
                    (in.op == Op::RecvGrad && is(i + 1, Op::Backward, in)) ||
                    (in.op == Op::SendGrad && i > 0 && is(i - 1, Op::Backward, in)) || is_compute(in.op);
    if (!ok) throw std::logic_error("pipeline executor: " + to_string(in) + " is not beside its compute op");
  }
}

// ZeRO stages 0 and 1 reduce a unit once the last microbatch's gradients are written: in every
// chunk that must be the last microbatch to finish.
void check_backward_order(const Schedule& s, Op done, const std::vector<Instr>& list) {
  std::vector<int> last(index(s.vpp), -1);
  for (const Instr& in : list)
    if (in.op == done) last[index(in.chunk)] = in.microbatch;
  for (int mb : last)
    if (mb != s.microbatches - 1)
      throw std::logic_error("pipeline executor: a chunk's last gradients are not the last microbatch's");
}

// Across a hop within the rank the later chunk's input grad is handed over before the earlier
// chunk's B, so no other B of the later chunk may come between: their B's must pair up.
void check_local_backward_pairs(const Schedule& s, int rank, const std::vector<Instr>& list) {
  const config::StagePlacement place = s.placement();
  for (int chunk = 0; chunk < s.vpp; ++chunk) {
    const int later = place.chunk_beside(rank, chunk, +1);
    if (later < 0) continue;
    int pending = -1;  // microbatch of the later chunk's B whose grad the earlier has not taken
    for (const Instr& in : list) {
      if (in.op != Op::Backward || (in.chunk != later && in.chunk != chunk)) continue;
      const bool ok = in.chunk == later ? pending < 0 : pending == in.microbatch;
      if (!ok)
        throw std::logic_error("pipeline executor: " + to_string(in) +
                               " breaks the pairs of B's across the hop within the rank");
      pending = in.chunk == later ? in.microbatch : -1;
    }
  }
}

}  // namespace

ScheduleExecutor::ScheduleExecutor(Schedule schedule, int pp_rank)
    : schedule_(std::move(schedule)), pp_rank_(pp_rank) {
  if (pp_rank < 0 || pp_rank >= schedule_.pp)
    throw std::logic_error("pipeline executor: no pp rank " + std::to_string(pp_rank));
  const std::vector<Instr>& list = schedule_.ranks[index(pp_rank_)];
  check_messages_beside_compute(list);
  check_backward_order(schedule_, gradients_done(), list);
  check_local_backward_pairs(schedule_, pp_rank_, list);
  buffers_ = std::move(rank_buffers(schedule_)[index(pp_rank_)]);
}

void ScheduleExecutor::run(StageWork& work) {
  const std::vector<Instr>& list = schedule_.ranks[index(pp_rank_)];
  // [chunk][microbatch]: its activation slot, -1 if none; the free slots of each chunk, or under a
  // cap (RankBuffers::shared_slots) of all of them, in free_slots[0].
  std::vector<std::vector<int>> slot_of(index(schedule_.vpp), std::vector<int>(index(schedule_.microbatches), -1));
  const bool shared = buffers_.shared_slots > 0;
  std::vector<std::vector<int>> free_slots(index(shared ? 1 : schedule_.vpp));
  for (int c = 0; c < static_cast<int>(free_slots.size()); ++c)
    for (int s = (shared ? buffers_.shared_slots : buffers_.activation_slots[index(c)]) - 1; s >= 0; --s)
      free_slots[index(c)].push_back(s);
  auto slots_of = [&](int chunk) -> std::vector<int>& { return free_slots[index(shared ? 0 : chunk)]; };
  struct InFlight {
    int released_after;  // list index (RankBuffers::send_released_after)
    int buffer;
  };
  std::vector<InFlight> in_flight;
  std::vector<int> free_buffers;
  for (int b = buffers_.send_buffers - 1; b >= 0; --b) free_buffers.push_back(b);
  auto take_buffer = [&](int i) {
    if (free_buffers.empty()) throw std::logic_error("pipeline executor: no free send buffer (rank_buffers is wrong)");
    const int b = free_buffers.back();
    free_buffers.pop_back();
    in_flight.push_back({buffers_.send_released_after[index(i)], b});
    return b;
  };
  auto release_until = [&](int i) {  // frees the sends known to be over before instruction i
    std::size_t kept = 0;
    for (const InFlight& f : in_flight) {
      if (f.released_after < i) {
        work.wait_send(f.buffer);
        free_buffers.push_back(f.buffer);
      } else {
        in_flight[kept++] = f;
      }
    }
    in_flight.resize(kept);
  };

  auto take_slot = [&](int chunk, int microbatch) {
    std::vector<int>& free = slots_of(chunk);
    if (free.empty()) throw std::logic_error("pipeline executor: no free activation slot (rank_buffers is wrong)");
    const int taken = free.back();
    free.pop_back();
    slot_of[index(chunk)][index(microbatch)] = taken;
    return taken;
  };

  const config::StagePlacement place = schedule_.placement();
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    release_until(i);
    const Instr& in = list[index(i)];
    int& slot = slot_of[index(in.chunk)][index(in.microbatch)];
    // A slot from the receive, or, with none before it, at F: the first stage's (after a hop within
    // the rank the earlier chunk's F has filled one already).
    if (in.op == Op::RecvAct || (in.op == Op::Forward && slot < 0)) take_slot(in.chunk, in.microbatch);
    // The chunk on the other side of a hop within the rank, -1 if none.
    const int later = place.chunk_beside(pp_rank_, in.chunk, +1);
    switch (in.op) {
      case Op::RecvAct:
        work.receive_activation(in.chunk, slot, in.peer);
        break;
      case Op::Forward:
        work.forward(in.chunk, slot, in.microbatch);
        // Handed over at once: the output is valid only until the rank's next forward.
        if (later >= 0) work.pass_activation(in.chunk, slot, later, take_slot(later, in.microbatch));
        break;
      case Op::SendAct:
        work.send_activation(in.chunk, slot, take_buffer(i), in.peer);
        break;
      case Op::RecvGrad:
        work.receive_gradient(in.chunk, in.peer);
        break;
      case Op::Backward:
      case Op::WeightGrad:
        if (in.op == Op::Backward && later >= 0) work.pass_gradient(later, in.chunk);
        if (in.op == Op::Backward)
          work.backward(in.chunk, slot, in.microbatch);
        else
          work.weight_grad(in.chunk, slot, in.microbatch);
        if (in.op == gradients_done()) {
          slots_of(in.chunk).push_back(slot);
          slot = -1;
        }
        break;
      case Op::SendGrad:
        work.send_gradient(in.chunk, take_buffer(i), in.peer);
        break;
    }
  }
  release_until(static_cast<int>(list.size()) + 1);
}

}  // namespace ptrain::pipeline
