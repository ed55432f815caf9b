// BatchLoader / EvalLoader: dp slices partition the global batch, the order is independent of the
// layout, a step loaded fresh equals the one reached by iterating, and the JobSpec factory wires
// every format.
#include "engine/data/batch_loader.h"

#include <catch2/catch.hpp>
#include <map>
#include <numeric>
#include <vector>

#include "engine/data/datasets.h"
#include "engine/data/llmc_dataset.h"
#include "engine/data/synthetic_dataset.h"
#include "engine/data/writers.h"
#include "tests/data/data_test_support.h"

using ptrain::data::BatchLoader;
using ptrain::data::EvalLoader;
using ptrain::data::LlmcDataset;
using ptrain::data::Sampler;
using ptrain::data::SyntheticDataset;
using ptrain::data::TokenSource;
using ptrain::data::testing::TempDir;

namespace {

// Sample i = tokens i*1000 + j: every token names its sample, so batches can be decoded.
class IndexSource final : public TokenSource {
 public:
  IndexSource(std::int64_t samples, int T) : samples_(samples), T_(T) {}
  std::int64_t num_samples() const override { return samples_; }
  std::int64_t num_tokens() const override { return samples_ * (T_ + 1); }
  int seq_len() const override { return T_; }
  int vocab() const override { return 1 << 30; }
  std::string describe() const override { return "index"; }
  void read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const override {
    for (int j = 0; j < T_; ++j) {
      inputs[j] = static_cast<std::int32_t>(index * 1000 + j);
      targets[j] = inputs[j] + 1;
    }
  }

 private:
  std::int64_t samples_;
  int T_;
};

// The samples of one step as seen by every rank, in (rank, microbatch, row) order.
// `resumed`: the (step, consumed samples) a run resumed at.
std::vector<std::int64_t> global_batch_samples(const TokenSource& source, const Sampler& sampler, int G,
                                               int mb, int dp, std::int64_t step,
                                               std::pair<std::int64_t, std::int64_t> resumed = {0, 0}) {
  std::vector<std::int64_t> samples;
  const int T = source.seq_len();
  std::vector<std::int32_t> in(static_cast<std::size_t>(mb * T)), tg(in.size());
  for (int r = 0; r < dp; ++r) {
    BatchLoader loader(source, sampler, G, mb, r, dp);
    loader.resume_at(resumed.first, resumed.second);
    for (int m = 0; m < loader.microbatches(); ++m) {
      loader.load_microbatch(step, m, in.data(), tg.data());
      for (int row = 0; row < mb; ++row) samples.push_back(in[static_cast<std::size_t>(row * T)] / 1000);
    }
  }
  return samples;
}

}  // namespace

TEST_CASE("batch loader: dp ranks and microbatches partition the global batch, in order") {
  IndexSource source(50, 3);
  const Sampler sampler(50, 42, true);
  const int G = 12;
  for (const auto& [mb, dp] :
       std::vector<std::pair<int, int>>{{1, 1}, {12, 1}, {2, 2}, {3, 2}, {1, 4}, {3, 4}, {1, 12}}) {
    INFO("micro_batch " << mb << " dp " << dp);
    for (std::int64_t step = 0; step < 10; ++step) {
      std::vector<std::int64_t> expected;
      for (std::int64_t p = step * G; p < (step + 1) * G; ++p) expected.push_back(sampler.sample_at(p));
      CHECK(global_batch_samples(source, sampler, G, mb, dp, step) == expected);
    }
  }
  // Rank r's slice is positions [r*G/dp, (r+1)*G/dp) of the batch.
  BatchLoader rank1(source, sampler, G, 2, 1, 3);
  CHECK(rank1.microbatches() == 2);
  CHECK(rank1.position(24, 0, 0) == 24 + 4);
  CHECK(rank1.position(24, 1, 1) == 24 + 7);
}

TEST_CASE("batch loader: targets are inputs shifted by one token") {
  TempDir dir;
  std::vector<std::uint16_t> tokens(200);
  std::iota(tokens.begin(), tokens.end(), std::uint16_t{0});
  ptrain::data::write_llmc_shard(dir / "s.bin", tokens);
  LlmcDataset ds(dir / "s.bin", 8, 50257);
  BatchLoader loader(ds, Sampler(ds.num_samples(), 1, true), 4, 2, 0, 1);
  std::vector<std::int32_t> in(16), tg(16);
  loader.load_microbatch(3, 1, in.data(), tg.data());
  for (int row = 0; row < 2; ++row) {
    const std::int64_t sample = loader.sample_index(loader.consumed_samples(3), 1, row);
    for (int j = 0; j < 8; ++j) {
      CHECK(in[static_cast<std::size_t>(row * 8 + j)] == sample * 8 + j);
      CHECK(tg[static_cast<std::size_t>(row * 8 + j)] == sample * 8 + j + 1);
    }
  }
}

TEST_CASE("batch loader: resume: step k loaded fresh equals step k reached by iterating") {
  SyntheticDataset source(16, 50257, 7, SyntheticDataset::kTrainStream, 37);  // epochs wrap every ~3 steps
  const int G = 12, mb = 3, dp = 2;
  std::map<std::int64_t, std::vector<std::int32_t>> iterated;
  {
    BatchLoader loader(source, Sampler(37, 99, true), G, mb, 1, dp);
    std::vector<std::int32_t> in(static_cast<std::size_t>(mb * 16)), tg(in.size());
    for (std::int64_t step = 0; step < 20; ++step) {
      for (int m = 0; m < loader.microbatches(); ++m) {
        loader.load_microbatch(step, m, in.data(), tg.data());
        auto& all = iterated[step];
        all.insert(all.end(), in.begin(), in.end());
        all.insert(all.end(), tg.begin(), tg.end());
      }
    }
  }
  for (const std::int64_t k : {0, 5, 13, 19}) {
    BatchLoader fresh(source, Sampler(37, 99, true), G, mb, 1, dp);
    std::vector<std::int32_t> all, in(static_cast<std::size_t>(mb * 16)), tg(in.size());
    for (int m = 0; m < fresh.microbatches(); ++m) {
      fresh.load_microbatch_at(k * G, m, in.data(), tg.data());  // what a checkpoint stores
      all.insert(all.end(), in.begin(), in.end());
      all.insert(all.end(), tg.begin(), tg.end());
    }
    CHECK(all == iterated[k]);
  }
}

TEST_CASE("batch loader: resumed with another global batch, the samples go on where they stopped") {
  IndexSource source(100, 2);
  const Sampler sampler(100, 5, true);
  // 4 steps of 8 took positions 0..31; steps 4 and 5 of 16 take 32..63 (an epoch ends at 100), in
  // every layout.
  for (const auto& [mb, dp] : std::vector<std::pair<int, int>>{{16, 1}, {2, 2}, {1, 4}}) {
    INFO("micro_batch " << mb << " dp " << dp);
    for (const std::int64_t step : {4, 5}) {
      std::vector<std::int64_t> expected;
      for (std::int64_t p = 32 + (step - 4) * 16; p < 32 + (step - 3) * 16; ++p) expected.push_back(sampler.sample_at(p));
      CHECK(global_batch_samples(source, sampler, 16, mb, dp, step, {4, 32}) == expected);
    }
  }
  BatchLoader loader(source, sampler, 16, 2, 0, 2);
  CHECK(loader.consumed_samples(6) == 96);
  loader.resume_at(4, 32);
  CHECK(loader.consumed_samples(4) == 32);
  CHECK(loader.consumed_samples(6) == 64);  // what a checkpoint of step 6 records
  CHECK_THROWS_AS(loader.consumed_samples(3), std::out_of_range);
  CHECK_THROWS_AS(loader.resume_at(4, -1), std::invalid_argument);
}

TEST_CASE("batch loader: the global batch does not depend on dp or micro_batch") {
  IndexSource source(1000, 2);
  const Sampler sampler(1000, 5, true);
  for (std::int64_t step : {0, 17, 200}) {
    const auto reference = global_batch_samples(source, sampler, 16, 16, 1, step);
    CHECK(global_batch_samples(source, sampler, 16, 1, 4, step) == reference);
    CHECK(global_batch_samples(source, sampler, 16, 2, 8, step) == reference);
  }
}

TEST_CASE("batch loader: bad arguments") {
  IndexSource source(10, 2);
  CHECK_THROWS_AS(BatchLoader(source, Sampler(10, 1, true), 10, 3, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(BatchLoader(source, Sampler(10, 1, true), 8, 2, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(BatchLoader(source, Sampler(11, 1, true), 8, 2, 0, 2), std::invalid_argument);
  BatchLoader ok(source, Sampler(10, 1, true), 8, 2, 0, 2);
  std::vector<std::int32_t> in(4), tg(4);
  CHECK_THROWS_AS(ok.load_microbatch(0, 2, in.data(), tg.data()), std::out_of_range);
}

TEST_CASE("eval loader: file order, capped at whole batches") {
  IndexSource source(50, 2);
  EvalLoader eval(source, 100, 8, 2, 1, 2);  // 50 / 8 = 6 full batches
  CHECK(eval.num_batches() == 6);
  CHECK(eval.microbatches() == 2);
  std::vector<std::int32_t> in(4), tg(4);
  eval.load_microbatch(5, 1, in.data(), tg.data());
  // batch 5 = samples 40..47; rank 1 has 44..47; microbatch 1 = 46, 47.
  CHECK(in[0] / 1000 == 46);
  CHECK(in[2] / 1000 == 47);
  CHECK(EvalLoader(source, 3, 8, 2, 0, 2).num_batches() == 3);
  // Fewer samples than one global batch: one batch that wraps around.
  IndexSource tiny(5, 2);
  EvalLoader wrap(tiny, 4, 8, 4, 1, 2);
  CHECK(wrap.num_batches() == 1);
  std::vector<std::int32_t> in4(8), tg4(8);
  wrap.load_microbatch(0, 0, in4.data(), tg4.data());
  CHECK(in4[0] / 1000 == 4);
  CHECK(in4[2] / 1000 == 0);
  CHECK_THROWS_AS(wrap.load_microbatch(1, 0, in4.data(), tg4.data()), std::out_of_range);
}

TEST_CASE("eval loader: check_tokens reads what any rank's evaluation reads, before the run") {
  // T 4: sample i is tokens [4i, 4i + 5). 2 batches of G 4 read samples 0..7 (tokens 0..32) on
  // either dp rank; token 33 is read by no evaluation.
  TempDir dir;
  auto check = [&](int bad_token) {
    std::vector<std::uint16_t> tokens(100, 7);
    tokens[static_cast<std::size_t>(bad_token)] = 60000;
    ptrain::data::write_llmc_shard(dir / "val.bin", tokens);
    const LlmcDataset valid(dir / "val.bin", 4, 50257);
    EvalLoader(valid, 2, 4, 1, 0, 2).check_tokens();  // rank 0, whose own share is samples 0, 1, 4, 5
  };
  ptrain::data::testing::require_data_error([&] { check(32); }, "val.bin", 1024 + 2 * 32,
                                            {"expected < 50257", "found 60000"});
  CHECK_NOTHROW(check(33));
}

TEST_CASE("datasets: the JobSpec factory opens each format") {
  ptrain::config::JobSpec job;
  job.model.seq_len = 8;
  job.model.vocab = 50257;
  job.train.global_batch = 4;
  job.train.micro_batch = 1;
  job.parallel.dp = 2;
  job.train.seed = 3;

  SECTION("synthetic: train and a held-out valid stream") {
    job.data.format = ptrain::config::DataFormat::Synthetic;
    auto train = ptrain::data::open_train_source(job);
    auto valid = ptrain::data::open_valid_source(job);
    REQUIRE(train);
    REQUIRE(valid);
    const BatchLoader loader = ptrain::data::make_train_loader(job, *train, 1);
    CHECK(loader.microbatches() == 2);
    const EvalLoader eval = ptrain::data::make_eval_loader(job, *valid, 0, 5);
    CHECK(eval.num_batches() == 5);
  }
  SECTION("llmc: glob train, valid path, shuffle off") {
    TempDir dir;
    std::vector<std::uint16_t> tokens(100, 7);
    ptrain::data::write_llmc_shard(dir / "train_000000.bin", tokens);
    ptrain::data::write_llmc_shard(dir / "train_000001.bin", tokens);
    ptrain::data::write_llmc_shard(dir / "val.bin", tokens);
    job.data.format = ptrain::config::DataFormat::Llmc;
    job.data.train = dir / "train_*.bin";
    job.data.shuffle = false;
    auto train = ptrain::data::open_train_source(job);
    CHECK(train->num_samples() == 2 * 12);
    CHECK(ptrain::data::make_train_loader(job, *train, 0).sampler().sample_at(5) == 5);
    CHECK(ptrain::data::open_valid_source(job) == nullptr);
    job.data.valid = dir / "val.bin";
    CHECK(ptrain::data::open_valid_source(job)->num_samples() == 12);
  }
  SECTION("megatron: a missing prefix is a DataError") {
    job.data.format = ptrain::config::DataFormat::Megatron;
    job.data.train = "/nonexistent/ptrain/prefix";
    CHECK_THROWS_AS(ptrain::data::open_train_source(job), ptrain::data::DataError);
  }
}
