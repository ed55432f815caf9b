#include "engine/pipeline/schedule.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>

#include "engine/pipeline/buffers.h"
#include "engine/pipeline/channels.h"
#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline {

const char* to_string(Op op) {
  switch (op) {
    case Op::Forward:
      return "F";
    case Op::Backward:
      return "B";
    case Op::WeightGrad:
      return "W";
    case Op::SendAct:
      return "SendAct";
    case Op::RecvAct:
      return "RecvAct";
    case Op::SendGrad:
      return "SendGrad";
    case Op::RecvGrad:
      return "RecvGrad";
  }
  return "?";
}

const char* trace_category(Op op) {
  return op == Op::Forward ? "forward" : op == Op::Backward ? "backward" : "weight_grad";
}

std::string to_string(const Instr& instr) {
  std::string s = std::string(to_string(instr.op)) + "(mb " + std::to_string(instr.microbatch) + ", chunk " +
                  std::to_string(instr.chunk) + ")";
  if (is_send(instr.op)) s += " to rank " + std::to_string(instr.peer);
  if (is_recv(instr.op)) s += " from rank " + std::to_string(instr.peer);
  if (instr.overlapped) s += " opening an F&B pair";
  return s;
}

std::vector<std::string> build_problems(config::ScheduleKind kind, int pp, int vpp, int microbatches,
                                        int max_in_flight) {
  using config::ScheduleKind;
  const std::string name = config::to_string(kind);
  std::vector<std::string> problems;
  if (pp < 1) problems.push_back("pp must be at least 1 (got " + std::to_string(pp) + ")");
  if (vpp < 1)
    problems.push_back("schedule.virtual_stages must be at least 1 (got " + std::to_string(vpp) + ")");
  if (microbatches < 1) {
    problems.push_back("there must be at least 1 microbatch per step (got " + std::to_string(microbatches) +
                       ")");
  }
  if (!problems.empty()) return problems;
  if (max_in_flight != 0) {
    if (!config::caps_in_flight(kind)) {
      problems.push_back("schedule.max_in_flight caps 1f1b and interleaved-1f1b, not " + name);
    } else if (max_in_flight < config::least_in_flight(pp, vpp)) {
      problems.push_back("schedule.max_in_flight must be at least " +
                         std::to_string(config::least_in_flight(pp, vpp)) + " with pp " + std::to_string(pp) +
                         " and " + std::to_string(vpp) + " virtual stages (got " + std::to_string(max_in_flight) +
                         ")");
    }
  }

  if (kind == ScheduleKind::Interleaved1F1B) {
    if (vpp < 2) {
      problems.push_back(name + " needs schedule.virtual_stages >= 2 (got " + std::to_string(vpp) +
                         "); use 1f1b for one model chunk per rank");
    }
    if (pp < 2)
      problems.push_back(name + " needs pp >= 2 (got " + std::to_string(pp) + "); use 1f1b or gpipe");
    if (microbatches % pp != 0) {
      problems.push_back(name + " needs the microbatches per step (" + std::to_string(microbatches) +
                         ") to be a multiple of pp (" + std::to_string(pp) +
                         "); change train.global_batch, train.micro_batch or parallel.pp");
    }
    return problems;
  }
  if (config::StagePlacement::of(kind, pp, vpp).v_shape) {
    if (vpp != 2) {
      problems.push_back(name + " places two model chunks per rank in a V, so schedule.virtual_stages is 2 (got " +
                         std::to_string(vpp) + ")");
    }
    if (pp < 2) problems.push_back(name + " needs pp >= 2 (got " + std::to_string(pp) + "); use 1f1b or gpipe");
    const int least = config::least_microbatches(kind, pp);
    if (microbatches < least) {
      problems.push_back(name + " needs at least " + std::to_string(least) + " microbatches per step (" +
                         (least == pp ? "pp" : "2*pp") + " with pp = " + std::to_string(pp) + "), got " +
                         std::to_string(microbatches) + "; raise train.global_batch or lower train.micro_batch");
    }
    return problems;
  }
  if (vpp != 1) {
    problems.push_back(name + " runs one model chunk per rank, so schedule.virtual_stages must be 1 (got " +
                       std::to_string(vpp) + "); use interleaved-1f1b for virtual stages");
  }
  if (microbatches < config::least_microbatches(kind, pp)) {
    problems.push_back(name + " needs at least as many microbatches per step (" +
                       std::to_string(microbatches) + ") as pipeline stages (pp = " + std::to_string(pp) +
                       "); raise train.global_batch or lower train.micro_batch");
  }
  return problems;
}

namespace {

// The chunk slots the most any rank's executor allocates for its list without a cap: each chunk's
// own peak, summed (over what the rank holds at once, since two chunks' peaks come at different
// times).
std::int64_t chunk_slots_allocated(const Schedule& s) {
  std::int64_t most = 0;
  for (int rank = 0; rank < s.pp; ++rank) {
    const std::vector<int> per_chunk = slot_counts(s, rank).per_chunk;
    most = std::max(most, std::accumulate(per_chunk.begin(), per_chunk.end(), std::int64_t{0}));
  }
  return most;
}

}  // namespace

Schedule build(const config::JobSpec& spec, int microbatches) {
  return build(spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages, microbatches,
               spec.schedule.max_in_flight);
}

Schedule build(config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight) {
  using config::ScheduleKind;
  Schedule s{kind, pp, vpp, microbatches, config::splits_weight_grad(kind), {}};
  switch (kind) {
    case ScheduleKind::Gpipe:
      s.ranks = detail::build_gpipe(pp, microbatches);
      break;
    case ScheduleKind::OneFOneB:
      s.ranks = detail::build_1f1b(pp, microbatches);
      break;
    case ScheduleKind::Interleaved1F1B:
      s.ranks = detail::build_interleaved_1f1b(pp, vpp, microbatches);
      break;
    case ScheduleKind::ZbH1:
      s.ranks = detail::build_zb_h1(pp, microbatches);
      break;
    case ScheduleKind::Zbv:
      s.ranks = detail::build_zbv(pp, microbatches);
      break;
    case ScheduleKind::DualPipeV:
      s.ranks = detail::build_dualpipev(pp, microbatches);
      break;
  }
  if (max_in_flight != 0 && !config::caps_in_flight(kind))
    throw std::logic_error("pipeline::build: schedule.max_in_flight caps 1f1b and interleaved-1f1b only");
  if (max_in_flight != 0 && chunk_slots_allocated(s) > static_cast<std::int64_t>(max_in_flight) * vpp) {
    s.ranks = detail::build_capped_1f1b(kind, pp, vpp, microbatches, max_in_flight);
    s.max_in_flight = max_in_flight;
  }
  return s;
}

std::vector<Channel> channels(const Schedule& s) {
  const detail::ChannelIndex index(s);
  std::vector<bool> used(static_cast<std::size_t>(index.count()), false);
  for (int r = 0; r < s.pp; ++r)
    for (const Instr& in : s.ranks[static_cast<std::size_t>(r)])
      if (is_send(in.op)) used[static_cast<std::size_t>(index.of(in, r))] = true;
  std::vector<Channel> out;
  for (int c = 0; c < index.count(); ++c)  // the index numbers them in this order
    if (used[static_cast<std::size_t>(c)]) out.push_back(index.channel(c));
  return out;
}

}  // namespace ptrain::pipeline
