// pipeline::rank_buffers against executions of the lists: under random interleavings of the ranks
// (sends left in flight, receives blocking, as schedule.h's contract allows), a send is always
// received before the point where its buffer is freed, the buffers in use never exceed the count,
// and each chunk's slots cover the microbatches between its F and its B (or W).
#include "engine/pipeline/buffers.h"

#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

#include "tests/pipeline/schedule_cases.h"

namespace ptrain::pipeline {
namespace {

using testing::Case;

// The message a send or receive carries: (sender, receiver, payload, microbatch, chunk of the sender).
using Message = std::tuple<int, int, bool, int, int>;

Message message_of(const Schedule& s, int rank, const Instr& in) {
  const bool act = in.op == Op::SendAct || in.op == Op::RecvAct;
  if (is_send(in.op)) return {rank, in.peer, act, in.microbatch, in.chunk};
  // The sender's chunk: activations come from the previous virtual stage, gradients from the next.
  const int stage = s.virtual_stage(rank, in.chunk) + (act ? -1 : 1);
  return {in.peer, rank, act, in.microbatch, stage / s.pp};
}

// Runs every rank's list in a random order of steps and checks the buffers on the way.
void execute(const Schedule& s, const std::vector<RankBuffers>& buffers, std::mt19937& rng) {
  const int pp = s.pp;
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  std::map<Message, bool> received;  // sent messages, and whether their receive has run
  std::vector<std::vector<std::pair<int, Message>>> in_flight(
      static_cast<std::size_t>(pp));  // (released_after, msg)
  std::vector<std::vector<int>> live(static_cast<std::size_t>(pp),
                                     std::vector<int>(static_cast<std::size_t>(s.vpp), 0));
  for (;;) {
    std::vector<int> ready;
    bool done = true;
    for (int r = 0; r < pp; ++r) {
      const auto& list = s.ranks[static_cast<std::size_t>(r)];
      if (next[static_cast<std::size_t>(r)] >= list.size()) continue;
      done = false;
      const Instr& in = list[next[static_cast<std::size_t>(r)]];
      if (!is_recv(in.op) || received.count(message_of(s, r, in)) != 0) ready.push_back(r);
    }
    if (done) break;
    REQUIRE_FALSE(ready.empty());  // the checker proved the lists deadlock-free
    const int r = ready[std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng)];
    const auto ri = static_cast<std::size_t>(r);
    const int i = static_cast<int>(next[ri]++);
    const Instr& in = s.ranks[ri][static_cast<std::size_t>(i)];
    auto& flying = in_flight[ri];
    for (std::size_t f = 0; f < flying.size();) {  // what the executor frees before instruction i
      if (flying[f].first < i) {
        REQUIRE(received.at(flying[f].second));
        flying.erase(flying.begin() + static_cast<std::ptrdiff_t>(f));
      } else {
        ++f;
      }
    }
    const auto chunk = static_cast<std::size_t>(in.chunk);
    if (in.op == Op::Forward) {
      REQUIRE(++live[ri][chunk] <= buffers[ri].activation_slots[chunk]);
      // Under a cap all the rank holds at once stays within it.
      if (s.max_in_flight > 0) REQUIRE(std::accumulate(live[ri].begin(), live[ri].end(), 0) <= s.max_in_flight * s.vpp);
    }
    if (in.op == (s.split_weight_grad ? Op::WeightGrad : Op::Backward)) --live[ri][chunk];
    if (is_send(in.op)) {
      received[message_of(s, r, in)] = false;
      flying.emplace_back(buffers[ri].send_released_after[static_cast<std::size_t>(i)], message_of(s, r, in));
      REQUIRE(static_cast<int>(flying.size()) <= buffers[ri].send_buffers);
    }
    if (is_recv(in.op)) received[message_of(s, r, in)] = true;
  }
}

TEST_CASE("send buffers are freed only after their receive, and never run out") {
  std::mt19937 rng(7);
  for (const Case& c : testing::sweep_with_caps(5, 12)) {
    INFO(testing::describe(c));
    const Schedule s = testing::build(c);
    const std::vector<RankBuffers> buffers = rank_buffers(s);
    REQUIRE(buffers.size() == static_cast<std::size_t>(c.pp));
    for (int run = 0; run < 4; ++run) execute(s, buffers, rng);
  }
}

TEST_CASE("1f1b: rank r keeps pp - r microbatches, and sends need few buffers") {
  const Schedule s = build(config::ScheduleKind::OneFOneB, 4, 1, 16);
  const std::vector<RankBuffers> buffers = rank_buffers(s);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(buffers[static_cast<std::size_t>(r)].activation_slots == std::vector<int>{4 - r});
    // In the steady state each send is known to be over by the time the next one goes out; the
    // cooldown's gradients, which nothing comes back after, wait for the end of the step.
    CHECK(buffers[static_cast<std::size_t>(r)].send_buffers <= 4);
  }
  CHECK(buffers[0].send_buffers >= 1);
  // gpipe keeps every microbatch.
  CHECK(rank_buffers(build(config::ScheduleKind::Gpipe, 2, 1, 6))[0].activation_slots == std::vector<int>{6});
  // One stage: no messages at all.
  CHECK(rank_buffers(build(config::ScheduleKind::OneFOneB, 1, 1, 5))[0].send_buffers == 0);
}

TEST_CASE("under a cap a rank's chunks share as many slots as it holds at once, and only then") {
  // Uncapped interleaved pp 4, vpp 2, 8 microbatches: chunk 0 of rank 0 holds all 8 at its peak,
  // chunk 1 four, though never 12 at once; under a cap of 4 microbatches (8 chunks) they share 8.
  const std::vector<RankBuffers> uncapped = rank_buffers(build(config::ScheduleKind::Interleaved1F1B, 4, 2, 8));
  CHECK(uncapped[0].activation_slots == std::vector<int>{8, 4});
  CHECK(uncapped[0].shared_slots == 0);
  const std::vector<RankBuffers> capped = rank_buffers(build(config::ScheduleKind::Interleaved1F1B, 4, 2, 8, 4));
  for (const RankBuffers& held : capped) CHECK(held.shared_slots <= 8);
  CHECK(capped[0].shared_slots == 8);
  // A cap that does not bind changes nothing.
  CHECK(rank_buffers(build(config::ScheduleKind::Interleaved1F1B, 4, 2, 8, 6))[0].shared_slots == 0);
}

}  // namespace
}  // namespace ptrain::pipeline
