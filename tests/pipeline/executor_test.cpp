// pipeline::ScheduleExecutor against a recording StageWork, over the sweep of schedules: it does
// every instruction of the rank's list in order, a microbatch keeps one activation slot from its F
// (or the receive right before it) until its gradients are written and no two microbatches of a
// chunk hold a slot at once, a send buffer is reused only after its send was waited for, and every
// send is waited for by the end of the step. Lists that break the executor's assumptions are refused.
#include "engine/pipeline/executor.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "tests/pipeline/schedule_cases.h"

namespace ptrain::pipeline {
namespace {

using testing::Case;

// Records what the executor asked for as the instructions it stands for, checking as it goes. The
// StageWork calls of a receive do not name the microbatch: it is read from the rank's list.
class RecordingWork final : public StageWork {
 public:
  RecordingWork(const Schedule& s, const RankBuffers& b, int rank)
      : list_(s.ranks[static_cast<std::size_t>(rank)]), buffers_(b), split_(s.split_weight_grad) {}
  std::vector<Instr> done;
  std::set<int> sending;  // buffers whose send is not yet waited for

  void receive_activation(int chunk, int slot, int peer) override {
    const int mb = next_microbatch(Op::RecvAct, chunk);
    hold(chunk, slot, mb);
    done.push_back({Op::RecvAct, mb, chunk, peer});
  }
  void forward(int chunk, int slot, int microbatch) override {
    const bool received = !done.empty() && done.back() == Instr{Op::RecvAct, microbatch, chunk, done.back().peer};
    if (received || passed_.count({chunk, slot}) > 0)
      REQUIRE(holds(chunk, slot, microbatch));  // the slot the activations were received or passed into
    else
      hold(chunk, slot, microbatch);  // the first virtual stage: taken at F
    passed_.erase({chunk, slot});
    done.push_back({Op::Forward, microbatch, chunk});
  }
  void pass_activation(int from_chunk, int from_slot, int chunk, int slot) override {
    // Right after the earlier chunk's F of the microbatch, which still holds its slot.
    REQUIRE(done.back() == Instr{Op::Forward, holder_.at({from_chunk, from_slot}), from_chunk});
    hold(chunk, slot, done.back().microbatch);
    passed_.insert({chunk, slot});
  }
  void pass_gradient(int from_chunk, int chunk) override {
    // The later chunk's last B hands its grad to the earlier chunk's B of the same microbatch.
    REQUIRE(last_backward_.count(from_chunk) == 1);
    expected_backward_[chunk] = last_backward_[from_chunk];
  }
  void send_activation(int chunk, int slot, int buffer, int peer) override {
    start_send(buffer);
    done.push_back({Op::SendAct, holder_.at({chunk, slot}), chunk, peer});
  }
  void receive_gradient(int chunk, int peer) override {
    done.push_back({Op::RecvGrad, next_microbatch(Op::RecvGrad, chunk), chunk, peer});
  }
  void backward(int chunk, int slot, int microbatch) override { compute(Op::Backward, chunk, slot, microbatch); }
  void weight_grad(int chunk, int slot, int microbatch) override { compute(Op::WeightGrad, chunk, slot, microbatch); }
  void send_gradient(int chunk, int buffer, int peer) override {
    start_send(buffer);
    done.push_back({Op::SendGrad, done.back().microbatch, chunk, peer});
  }
  void wait_send(int buffer) override { REQUIRE(sending.erase(buffer) == 1); }

 private:
  int next_microbatch(Op op, int chunk) {
    int& seen = seen_[{op, chunk}];
    int n = 0;
    for (const Instr& in : list_) {
      if (in.op != op || in.chunk != chunk) continue;
      if (n++ == seen) {
        ++seen;
        return in.microbatch;
      }
    }
    FAIL("more " << to_string(op) << " of chunk " << chunk << " than the list has");
    return -1;
  }
  bool holds(int chunk, int slot, int microbatch) const {
    auto it = holder_.find({chunk, slot});
    return it != holder_.end() && it->second == microbatch;
  }
  void hold(int chunk, int slot, int microbatch) {
    const bool shared = buffers_.shared_slots > 0;
    REQUIRE(slot >= 0);
    REQUIRE(slot < (shared ? buffers_.shared_slots : buffers_.activation_slots[static_cast<std::size_t>(chunk)]));
    REQUIRE(holder_.count({chunk, slot}) == 0);  // no other microbatch of the chunk holds it
    if (shared) REQUIRE(shared_taken_.insert(slot).second);  // nor one of another chunk, under a cap
    holder_[{chunk, slot}] = microbatch;
  }
  void compute(Op op, int chunk, int slot, int microbatch) {
    REQUIRE(holds(chunk, slot, microbatch));
    if (op == Op::Backward) {
      if (auto it = expected_backward_.find(chunk); it != expected_backward_.end()) {
        REQUIRE(it->second == microbatch);
        expected_backward_.erase(it);
      }
      last_backward_[chunk] = microbatch;
    }
    if (op == (split_ ? Op::WeightGrad : Op::Backward)) {
      holder_.erase({chunk, slot});
      shared_taken_.erase(slot);
    }
    done.push_back({op, microbatch, chunk});
  }
  void start_send(int buffer) {
    REQUIRE(buffer >= 0);
    REQUIRE(buffer < buffers_.send_buffers);
    REQUIRE(sending.insert(buffer).second);  // not reused while its send may be in flight
  }

  const std::vector<Instr>& list_;
  const RankBuffers& buffers_;
  bool split_;
  std::map<std::pair<int, int>, int> holder_;  // (chunk, slot) -> microbatch
  std::set<int> shared_taken_;                 // under a cap (RankBuffers::shared_slots): slots held
  std::map<std::pair<Op, int>, int> seen_;     // (receive op, chunk) -> receives done
  std::set<std::pair<int, int>> passed_;       // (chunk, slot) pass_activation filled, F not yet run
  std::map<int, int> last_backward_;           // chunk -> microbatch of its last B
  std::map<int, int> expected_backward_;       // chunk -> microbatch whose grad was passed to it
};

}  // namespace

TEST_CASE("the executor runs every list in order, with slots and send buffers as rank_buffers counts") {
  for (const Case& c : testing::sweep_with_caps(4, 9)) {
    const Schedule s = testing::build(c);
    for (int r = 0; r < c.pp; ++r) {
      INFO(testing::describe(c) << " rank " << r);
      ScheduleExecutor executor(s, r);
      // An F&B pair (dualpipev) runs as listed, F then B: the same calls as without the mark.
      std::vector<Instr> listed = s.ranks[static_cast<std::size_t>(r)];
      for (Instr& in : listed) in.overlapped = false;
      for (int step = 0; step < 2; ++step) {  // every step starts from free slots and buffers
        RecordingWork work(executor.schedule(), executor.buffers(), r);
        executor.run(work);
        CHECK(work.done == listed);
        CHECK(work.sending.empty());
      }
    }
  }
}

TEST_CASE("the executor refuses lists it cannot run") {
  Schedule s = build(config::ScheduleKind::OneFOneB, 2, 1, 2);
  CHECK_THROWS_AS(ScheduleExecutor(s, 2), std::logic_error);  // no such pp rank
  SECTION("a message away from its compute op") {
    std::swap(s.ranks[1][0], s.ranks[1][1]);  // RecvAct(0) F(0) -> F(0) RecvAct(0)
    CHECK_THROWS_WITH(ScheduleExecutor(s, 1), Catch::Contains("is not beside its compute op"));
  }
  SECTION("B's across the hop within a rank that do not pair up") {
    Schedule v = build(config::ScheduleKind::Zbv, 2, 2, 2);
    auto& last_rank = v.ranks[1];
    // B1(0) B0(0) B1(1) B0(1) on the last rank -> B1(0) B1(1) B0(0) B0(1): B0(0) and its SendGrad
    // moved past B1(1).
    auto is_b = [](const Instr& in, int mb, int chunk) { return in.op == Op::Backward && in.microbatch == mb && in.chunk == chunk; };
    auto b00 = std::find_if(last_rank.begin(), last_rank.end(), [&](const Instr& in) { return is_b(in, 0, 0); });
    auto b11 = std::find_if(last_rank.begin(), last_rank.end(), [&](const Instr& in) { return is_b(in, 1, 1); });
    REQUIRE(b00 < b11);
    std::rotate(b00, b00 + 2, b11 + 1);
    CHECK_THROWS_WITH(ScheduleExecutor(v, 1), Catch::Contains("breaks the pairs of B's across the hop within the rank"));
  }
  SECTION("a chunk whose last gradients are not the last microbatch's") {
    Schedule one = build(config::ScheduleKind::Gpipe, 1, 1, 2);
    one.ranks[0] = {{Op::Forward, 0, 0}, {Op::Forward, 1, 0}, {Op::Backward, 1, 0}, {Op::Backward, 0, 0}};
    CHECK_THROWS_WITH(ScheduleExecutor(one, 0), Catch::Contains("last gradients are not the last microbatch's"));
  }
}

}  // namespace ptrain::pipeline
