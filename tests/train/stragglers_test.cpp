// The slowest rank of a step against its stage's median, and the straggler warning's stretch
// (engine/train/stragglers.h).
#include "engine/train/stragglers.h"

#include <catch2/catch.hpp>
#include <vector>

using ptrain::train::slowest_rank;
using ptrain::train::SlowestRank;
using ptrain::train::StragglerWatch;

TEST_CASE("stragglers: the slowest rank against the median of all ranks of one stage") {
  const std::vector<double> seconds = {0.10, 0.11, 0.30, 0.09};
  const std::vector<int> stage = {0, 0, 0, 0};
  const SlowestRank s = slowest_rank(seconds, stage);
  CHECK(s.rank == 2);
  CHECK(s.seconds == 0.30);
  CHECK(s.median_seconds == Approx(0.105));  // the mean of the middle two of four
  CHECK(s.ratio() == Approx(0.30 / 0.105));
}

TEST_CASE("stragglers: an odd count's median is its middle rank's") {
  const std::vector<double> seconds = {0.2, 0.5, 0.1};
  const std::vector<int> stage = {0, 0, 0};
  const SlowestRank s = slowest_rank(seconds, stage);
  CHECK(s.rank == 1);
  CHECK(s.median_seconds == 0.2);
}

TEST_CASE("stragglers: one rank is its own median, ratio 1") {
  const std::vector<double> seconds = {0.25};
  const std::vector<int> stage = {0};
  const SlowestRank s = slowest_rank(seconds, stage);
  CHECK(s.rank == 0);
  CHECK(s.seconds == 0.25);
  CHECK(s.median_seconds == 0.25);
  CHECK(s.ratio() == 1.0);
}

TEST_CASE("stragglers: a rank is set against its own pipeline stage, not the heavier stage beside it") {
  // Stage 1 (ranks 1 and 3: the head and the loss) computes twice stage 0's; within stage 0 rank 2
  // is 1.5x rank 0, which is the straggler, while stage 1's ranks are even.
  const std::vector<double> seconds = {0.10, 0.20, 0.15, 0.20};
  const std::vector<int> stage = {0, 1, 0, 1};
  const SlowestRank s = slowest_rank(seconds, stage);
  CHECK(s.rank == 2);
  CHECK(s.median_seconds == Approx(0.125));
}

TEST_CASE("stragglers: stages of one rank each have no straggler: the busiest rank is named") {
  const std::vector<double> seconds = {0.1, 0.3};
  const std::vector<int> stage = {0, 1};
  const SlowestRank s = slowest_rank(seconds, stage);
  CHECK(s.rank == 1);
  CHECK(s.ratio() == 1.0);
}

TEST_CASE("stragglers: the warning comes once the same rank stays over the ratio for the steps asked") {
  StragglerWatch watch(1.2, 3);
  const SlowestRank slow{1, 0.3, 0.1}, even{1, 0.11, 0.1}, other{2, 0.3, 0.1};
  CHECK_FALSE(watch.observe(1, slow));
  CHECK_FALSE(watch.observe(2, slow));
  const auto warning = watch.observe(3, slow);
  REQUIRE(warning);
  CHECK(warning->find("rank 1 straggles") != std::string::npos);
  CHECK(warning->find("0.3000 s in step 3") != std::string::npos);
  CHECK(warning->find("median rank's 0.1000 s (3.00x)") != std::string::npos);
  CHECK(warning->find("for 3 steps in a row (from step 1)") != std::string::npos);
  CHECK_FALSE(watch.observe(4, slow));  // once per stretch
  CHECK_FALSE(watch.observe(5, even));  // back within the ratio: the stretch ends
  CHECK_FALSE(watch.observe(6, slow));
  CHECK_FALSE(watch.observe(7, other));  // another rank: a stretch of its own
  CHECK_FALSE(watch.observe(8, slow));
  CHECK_FALSE(watch.observe(9, slow));
  CHECK(watch.observe(10, slow));
}

TEST_CASE("stragglers: a ratio at the limit is no straggler") {
  StragglerWatch watch(1.5, 1);
  CHECK_FALSE(watch.observe(1, SlowestRank{0, 0.15, 0.1}));
  CHECK(watch.observe(2, SlowestRank{0, 0.151, 0.1}));
}
