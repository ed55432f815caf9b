#include "engine/comm/heartbeat.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace ptrain::dist {
namespace {

constexpr std::size_t kMaxTableLines = 64;

bool point_to_point(const std::string& op) {
  return op == "send" || op == "recv" || op == "isend" || op == "open_channel";
}

std::string describe(const CollectivePosition& p) {
  return p.op + " #" + std::to_string(p.seq) + " (call " + std::to_string(p.group_call) + " on " + p.group + ")" +
         (p.in_flight ? " IN FLIGHT" : " done");
}

// Whether `other` is in (or past) the call `mine`: a collective's members count their calls on the
// group alike; point to point, the other end must at least be in a call on the group.
bool entered(const CollectivePosition& mine, const std::optional<CollectivePosition>& other) {
  if (!other || other->group_id != mine.group_id) return false;
  if (point_to_point(mine.op)) return other->in_flight;
  return other->group_call >= mine.group_call;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

std::string encode_heartbeat(const Heartbeat& beat) {
  std::string text = "hb1 " + std::to_string(beat.count);
  if (!beat.at) return text + " -";
  const CollectivePosition& p = *beat.at;
  // The group's name last: the rest are single words.
  return text + " " + std::to_string(p.seq) + " " + p.op + " " + std::to_string(p.group_id) + " " +
         std::to_string(p.group_call) + " " + std::to_string(p.peer) + " " + (p.in_flight ? "1" : "0") + " " + p.group;
}

std::optional<Heartbeat> decode_heartbeat(const std::string& text) {
  std::istringstream in(text);
  std::string tag, rest;
  Heartbeat beat;
  if (!(in >> tag >> beat.count) || tag != "hb1") return std::nullopt;
  CollectivePosition p;
  int in_flight = 0;
  if (!(in >> p.seq)) return beat;  // "-": no collective yet
  if (!(in >> p.op >> p.group_id >> p.group_call >> p.peer >> in_flight >> std::ws) || !std::getline(in, p.group))
    return std::nullopt;
  p.in_flight = in_flight != 0;
  beat.at = p;
  return beat;
}

HangVerdict judge_hang(const Comm& comm, const CollectivePosition& mine,
                       const std::vector<std::optional<Heartbeat>>& before,
                       const std::vector<std::optional<Heartbeat>>& after, double interval_s) {
  const Group& g = comm.group(mine.group_id);
  std::vector<int> waited_for;  // the world ranks the call needs
  if (point_to_point(mine.op) && mine.peer >= 0 && mine.peer < g.size())
    waited_for = {g.ranks[static_cast<std::size_t>(mine.peer)]};
  else
    for (const int r : g.ranks) waited_for.push_back(r);
  const auto beating = [&](int r) {
    const auto& a = before[static_cast<std::size_t>(r)];
    const auto& b = after[static_cast<std::size_t>(r)];
    return b && (!a || b->count != a->count);
  };
  std::vector<int> silent, absent;
  for (int r = 0; r < comm.world(); ++r)
    if (r != comm.rank() && !beating(r)) silent.push_back(r);
  for (const int r : waited_for) {
    const auto& b = after[static_cast<std::size_t>(r)];
    // With a rank silent, one still inside an earlier call waits as this rank does: a ring's ranks
    // leave a call at different times, and one that needs the silent rank's last chunk is stuck in
    // it (seen: SIGSTOP of rank 2 of 4 named rank 3 too). It stays in the table, not the headline.
    const bool waiting_elsewhere = !silent.empty() && b && b->at && b->at->in_flight;
    if (r != comm.rank() && beating(r) && !entered(mine, b ? b->at : std::nullopt) && !waiting_elsewhere)
      absent.push_back(r);
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", interval_s);
  std::string headline;
  if (!silent.empty())
    headline = rank_list(silent) + " stopped beating (no heartbeat in " + seconds +
               " s: stopped by a signal, swapped out, or the whole process hung)";
  if (!absent.empty())
    headline += (headline.empty() ? "" : "; ") + rank_list(absent) + " never entered " + mine.op + " call " +
                std::to_string(mine.group_call) + " on " + mine.group + " (alive, but elsewhere)";
  // Every rank this call waits for is in it: they wait in turn for others. A chain of waits ends at
  // a rank that is alive and in no call (stuck in computation or I/O).
  std::vector<int> idle;
  if (headline.empty())
    for (int r = 0; r < comm.world(); ++r) {
      const auto& b = after[static_cast<std::size_t>(r)];
      if (r != comm.rank() && b && (!b->at || !b->at->in_flight)) idle.push_back(r);
    }
  if (!idle.empty())
    headline = rank_list(idle) + " in no collective while the others wait (alive: stuck in computation or I/O?)";
  if (headline.empty())
    headline = "every rank " + mine.op + " call " + std::to_string(mine.group_call) + " on " + mine.group +
               " waits for is beating and in it: no rank hung (a slow or broken connection?)";
  std::set<int> shown(waited_for.begin(), waited_for.end());
  shown.insert(comm.rank());
  shown.insert(silent.begin(), silent.end());
  shown.insert(idle.begin(), idle.end());
  std::string table = "\neach rank's heartbeat and latest collective:";
  std::size_t lines = 0;
  for (const int r : shown) {
    if (++lines > kMaxTableLines) {
      table += "\n  ... and " + std::to_string(shown.size() - kMaxTableLines) + " more ranks";
      break;
    }
    const auto& b = after[static_cast<std::size_t>(r)];
    const std::string state = r == comm.rank() ? "this rank      " : beating(r) ? "beating        " : "NOT BEATING    ";
    const std::optional<CollectivePosition> at = r == comm.rank() ? std::optional<CollectivePosition>(mine)
                                                 : b                ? b->at
                                                                    : std::nullopt;
    table += "\n  rank " + std::to_string(r) + ": " + state +
             (at ? describe(*at) : b || r == comm.rank() ? "no collective yet" : "no heartbeat posted");
  }
  return {headline + table, static_cast<int>(silent.size())};
}

std::string lead_with_verdict(const std::string& verdict, const std::string& failure) {
  if (verdict.empty()) return failure;
  const std::size_t cut = std::min(verdict.find('\n'), verdict.size());
  return verdict.substr(0, cut) + "; " + failure + verdict.substr(cut);
}

}  // namespace ptrain::dist
