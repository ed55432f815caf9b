// SyntheticDataset: deterministic, follows its documented definition, splits differ.
#include "engine/data/synthetic_dataset.h"

#include <catch2/catch.hpp>
#include <set>
#include <vector>

using ptrain::data::SyntheticDataset;

namespace {

std::vector<std::int32_t> tokens_of(const SyntheticDataset& ds, std::int64_t index) {
  const int T = ds.seq_len();
  std::vector<std::int32_t> in(static_cast<std::size_t>(T)), tg(static_cast<std::size_t>(T));
  ds.read_sample(index, in.data(), tg.data());
  for (int j = 0; j + 1 < T; ++j)
    REQUIRE(tg[static_cast<std::size_t>(j)] == in[static_cast<std::size_t>(j) + 1]);
  in.push_back(tg.back());
  return in;
}

}  // namespace

TEST_CASE("synthetic: each sample is the documented arithmetic progression") {
  SyntheticDataset ds(16, 50257, 1234);
  CHECK(ds.alphabet() == 1024);
  CHECK(ds.num_samples() == SyntheticDataset::kDefaultSamples);
  std::set<std::int64_t> strides;
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{1}, std::int64_t{77}, (std::int64_t{1} << 39) + 3}) {
    const auto p = ds.progression(i);
    REQUIRE(p.start >= 0);
    REQUIRE(p.start < 1024);
    REQUIRE(p.stride >= 1);
    REQUIRE(p.stride <= 8);
    const auto t = tokens_of(ds, i);
    for (std::size_t j = 0; j < t.size(); ++j)
      CHECK(t[j] == (p.start + static_cast<std::int64_t>(j) * p.stride) % 1024);
  }
  for (std::int64_t i = 0; i < 200; ++i) strides.insert(ds.progression(i).stride);
  CHECK(strides.size() == 8);
}

TEST_CASE("synthetic: deterministic in (seed, stream, index), seeds and streams differ") {
  SyntheticDataset a(8, 300, 5), b(8, 300, 5), c(8, 300, 6), valid(8, 300, 5, SyntheticDataset::kValidStream);
  CHECK(a.alphabet() == 300);
  int same_seed_diff = 0, other_seed_diff = 0, other_stream_diff = 0;
  for (std::int64_t i = 0; i < 100; ++i) {
    same_seed_diff += tokens_of(a, i) != tokens_of(b, i);
    other_seed_diff += tokens_of(a, i) != tokens_of(c, i);
    other_stream_diff += tokens_of(a, i) != tokens_of(valid, i);
    for (std::int32_t t : tokens_of(a, i)) REQUIRE((t >= 0 && t < 300));
  }
  CHECK(same_seed_diff == 0);
  CHECK(other_seed_diff > 90);
  CHECK(other_stream_diff > 90);
}

TEST_CASE("synthetic: a small vocabulary and a custom count") {
  SyntheticDataset ds(4, 3, 1, SyntheticDataset::kTrainStream, 10);
  CHECK(ds.alphabet() == 3);
  CHECK(ds.num_samples() == 10);
  for (std::int64_t i = 0; i < 10; ++i) {
    for (std::int32_t t : tokens_of(ds, i)) REQUIRE((t >= 0 && t < 3));
  }
  CHECK_THROWS_AS(tokens_of(ds, 10), std::out_of_range);
  CHECK_THROWS_AS(SyntheticDataset(0, 3, 1), std::invalid_argument);
}
