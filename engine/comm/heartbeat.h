// Heartbeats: each rank's session thread (comm/session.h) tells the job's store, a few times a
// second, that the rank is alive and where it is among its collectives (its latest call). When a
// call times out, the rank that gave up reads every rank's heartbeat twice and names the ranks it
// waited for in vain: those that stopped beating (stopped by a signal, swapped out, a whole process
// hung), then the members of the call that are alive but never entered it (unless, with a rank
// silent, they are waiting inside an earlier call: blocked, not hung), with each rank's latest
// collective side by side (docs/faults.md, "The rank that hung is named"). The rank that gave up
// first is only the first to notice. Pure: the encoding and the judgement; the store keys are
// rendezvous.h's (post_heartbeat, read_heartbeats).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/comm.h"

namespace ptrain::dist {

struct Heartbeat {
  std::uint64_t count = 0;                // beats so far: a live rank's grows
  std::optional<CollectivePosition> at;   // none before its first collective
};

std::string encode_heartbeat(const Heartbeat& beat);
// nullopt for text that is not a heartbeat.
std::optional<Heartbeat> decode_heartbeat(const std::string& text);

// The verdict of rank comm.rank() on the call it gave up in (`mine`, from its log), from every rank's
// heartbeat read twice, `interval_s` apart (`before`, `after`; nullopt where a rank posted none): a
// first line naming the hung ranks ("rank 3 stopped beating ..."; "rank 1 never entered ..."; when
// every rank waited for is beating and in the call, the ranks alive and in no call, where the chain
// of waits ends; else that no rank hung), then a table of the call's ranks and those named, one line
// each, with their latest collectives (at most 64 lines).
struct HangVerdict {
  std::string text;
  int silent = 0;  // ranks that stopped beating (or never beat): they will read nothing more
};
HangVerdict judge_hang(const Comm& comm, const CollectivePosition& mine,
                       const std::vector<std::optional<Heartbeat>>& before,
                       const std::vector<std::optional<Heartbeat>>& after, double interval_s);

// `failure` (a collective's error) led by `verdict` (judge_hang's text): the verdict's first line, then
// the failure, then the verdict's table; `failure` alone for an empty verdict.
std::string lead_with_verdict(const std::string& verdict, const std::string& failure);

}  // namespace ptrain::dist
