// Pipeline schedules as pure instruction lists: one source of truth for the simulator, the
// schedule drawing and the executor. Which rank and chunk hold a virtual stage is the kind's
// placement (config/stage_placement.h): Megatron's v = chunk*pp + pp_rank, or the V shape of zbv
// and dualpipev.
//
// Communication is explicit. Every compute op carries its messages around it:
//   [RecvAct(mb,c) from prev] F(mb,c) [SendAct(mb,c) to next]     (RecvAct right before its F)
//   [RecvGrad(mb,c) from next] B(mb,c) [SendGrad(mb,c) to prev]   (SendGrad right after its B)
// The first virtual stage has no RecvAct/SendGrad, the last no SendAct/RecvGrad. W has no messages.
// Neither has a hop between two chunks of one rank (the V's turn on rank pp-1): there the list
// order alone carries the dependency (F of the earlier chunk before F of the later one, B of the
// later before B of the earlier), and the executor hands the tensor over in memory.
// In a send/recv the chunk is the local one (the sender's chunk in a send, the receiver's in a
// recv); `peer` is the pp rank on the other side.
//
// F&B pairs (dualpipev; DeepSeek's DualPipe runs each pair's F and B at once, one's communication
// hidden behind the other's compute): an F with `overlapped` set and the rank's next compute op, a
// B, form a pair, with that B's W when it follows at once (the unsplit backward). The executor runs
// a pair as it is listed, F then B; the simulator can time it as one op (OpCosts::forward_backward)
// that receives both inputs before it starts and sends both outputs when it ends, as DualPipe does.
//
// Execution contract (what check() proves deadlock-free): sends are asynchronous (buffered, e.g.
// isend whose completion is awaited later), receives block until the matching send was issued,
// and messages are matched in FIFO order per channel = (sender, receiver, payload), where payload
// is activation or gradient. The executor must therefore keep activations and gradients on
// separate channels (tags or communicators): on one channel the order is guaranteed, across the
// two it is not. check() proves it with each F&B pair's receives all done before the pair and its
// sends issued after it, which proves it for the pair run as listed too (there a send comes earlier
// and a receive later).
#pragma once

#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/config/stage_placement.h"

namespace ptrain::pipeline {

enum class Op {
  Forward,     // F(mb, chunk)
  Backward,    // B(mb, chunk): input grad; also the weight grad unless the schedule splits W
  WeightGrad,  // W(mb, chunk): weight grad (schedules that split it: zb-h1, zbv, dualpipev)
  SendAct,     // activations of F(mb, chunk) to the next virtual stage (peer = its pp rank)
  RecvAct,     // activations for F(mb, chunk) from the previous virtual stage
  SendGrad,    // input grad of B(mb, chunk) to the previous virtual stage
  RecvGrad,    // output grad for B(mb, chunk) from the next virtual stage
};
const char* to_string(Op);
// A compute op's category in Chrome traces, simulated and real: "forward", "backward", "weight_grad".
const char* trace_category(Op);
// Inline: the simulator, the checker and the channel index ask once per instruction.
inline bool is_compute(Op op) { return op == Op::Forward || op == Op::Backward || op == Op::WeightGrad; }
inline bool is_send(Op op) { return op == Op::SendAct || op == Op::SendGrad; }
inline bool is_recv(Op op) { return op == Op::RecvAct || op == Op::RecvGrad; }

struct Instr {
  Op op;
  int microbatch;
  int chunk;
  int peer = -1;  // pp rank on the other side of a send/recv; -1 for compute
  bool overlapped = false;  // on an F: it opens an F&B pair with the rank's next B (see above)
  bool operator==(const Instr&) const = default;
};
// "F(mb 3, chunk 1)", "RecvAct(mb 3, chunk 1) from rank 2", "F(mb 3, chunk 0) opening an F&B
// pair", for messages and reports.
std::string to_string(const Instr&);

struct Schedule {
  config::ScheduleKind kind;
  int pp = 1;
  int vpp = 1;  // virtual stages (model chunks) per pp rank
  int microbatches = 1;
  bool split_weight_grad = false;         // true when W is its own instruction (zb-h1, zbv, dualpipev)
  std::vector<std::vector<Instr>> ranks;  // ranks[pp_rank] = instruction list in execution order
  // The cap on microbatches in flight the order was built under (schedule.max_in_flight), or 0
  // where the kind's own order ran: uncapped, or its chunk slots within the cap anyway.
  int max_in_flight = 0;

  int virtual_stages() const { return pp * vpp; }
  config::StagePlacement placement() const { return config::StagePlacement::of(kind, pp, vpp); }
  int virtual_stage(int pp_rank, int chunk) const { return placement().virtual_stage(pp_rank, chunk); }
  // Compute instructions (F, B, W) a correct schedule has in total over all ranks.
  int compute_ops() const { return microbatches * virtual_stages() * (split_weight_grad ? 3 : 2); }
};

// A channel of the schedule's messages: what pp rank `from` sends pp rank `to`.
struct Channel {
  int from = 0;
  int to = 0;
  bool activations = true;  // else gradients
  bool operator==(const Channel&) const = default;
};
// The channels the messages of a schedule use, each once, ordered by sender, receiver, then
// activations before gradients (an order every rank can agree on without talking).
std::vector<Channel> channels(const Schedule& s);

// Problems with the arguments for a kind (e.g. interleaved needs microbatches % pp == 0), each a
// sentence; empty when build() accepts them. max_in_flight: schedule.max_in_flight, 0 for none.
std::vector<std::string> build_problems(config::ScheduleKind kind, int pp, int vpp, int microbatches,
                                        int max_in_flight = 0);
// Precondition: build_problems(...) is empty. With max_in_flight set and the kind's own order
// needing more chunk slots on some rank than max_in_flight*vpp (each chunk's own peak, summed over
// the rank's chunks, as rank_buffers counts them without a cap), the order built under the cap
// instead (schedule_capped.cpp), whose chunks share max_in_flight*vpp slots at most.
Schedule build(config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight = 0);
// The job's schedule (kind, pp, virtual stages, max_in_flight) over `microbatches`.
Schedule build(const config::JobSpec& spec, int microbatches);

}  // namespace ptrain::pipeline
