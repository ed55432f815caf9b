// LlmcDataset: exact read-back of known shards, sample numbering across shards, and a DataError
// naming file and offset for every kind of malformed shard.
#include "engine/data/llmc_dataset.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "engine/data/writers.h"
#include "tests/data/data_test_support.h"

using ptrain::data::DataError;
using ptrain::data::LlmcDataset;
using ptrain::data::write_llmc_shard;
using ptrain::data::testing::patch;
using ptrain::data::testing::require_data_error;
using ptrain::data::testing::resize_file;
using ptrain::data::testing::TempDir;

namespace {

std::vector<std::uint16_t> iota_tokens(int n, std::uint16_t first) {
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

struct Sample {
  std::vector<std::int32_t> inputs, targets;
};

Sample read(const ptrain::data::TokenSource& source, std::int64_t index) {
  Sample s{std::vector<std::int32_t>(static_cast<std::size_t>(source.seq_len())),
           std::vector<std::int32_t>(static_cast<std::size_t>(source.seq_len()))};
  source.read_sample(index, s.inputs.data(), s.targets.data());
  return s;
}

}  // namespace

TEST_CASE("llmc: shards from a glob read back exactly, in name order, samples never crossing shards") {
  TempDir dir;
  const int T = 4;
  // Written out of order: the glob must sort by name. 11 tokens -> 2 samples, 9 -> 2, 5 -> 1.
  write_llmc_shard(dir / "train_000001.bin", iota_tokens(9, 100));
  write_llmc_shard(dir / "train_000000.bin", iota_tokens(11, 0));
  write_llmc_shard(dir / "train_000002.bin", iota_tokens(5, 200));
  write_llmc_shard(dir / "val.bin", iota_tokens(5, 300));  // not matched by the glob

  LlmcDataset ds(dir / "train_*.bin", T, 1000);
  REQUIRE(ds.shards().size() == 3);
  CHECK(ds.shards()[0].path == dir / "train_000000.bin");
  CHECK(ds.shards()[1].path == dir / "train_000001.bin");
  CHECK(ds.num_tokens() == 25);
  CHECK(ds.num_samples() == 5);
  CHECK(ds.shards()[1].first_sample == 2);
  CHECK(ds.shards()[2].samples == 1);

  const std::vector<std::int32_t> firsts = {0, 4, 100, 104, 200};
  for (std::int64_t i = 0; i < ds.num_samples(); ++i) {
    const Sample s = read(ds, i);
    const std::int32_t f = firsts[static_cast<std::size_t>(i)];
    CHECK(s.inputs == std::vector<std::int32_t>{f, f + 1, f + 2, f + 3});
    CHECK(s.targets == std::vector<std::int32_t>{f + 1, f + 2, f + 3, f + 4});
  }
  CHECK_THROWS_AS(read(ds, 5), std::out_of_range);
  CHECK_THROWS_AS(read(ds, -1), std::out_of_range);
  CHECK(ds.describe().find("3 shard") != std::string::npos);
}

TEST_CASE("llmc: a plain path works, short shards contribute no samples") {
  TempDir dir;
  write_llmc_shard(dir / "a.bin", iota_tokens(3, 0));  // < T + 1 tokens
  write_llmc_shard(dir / "b.bin", iota_tokens(9, 10));
  LlmcDataset plain(dir / "b.bin", 4, 100);
  CHECK(plain.num_samples() == 2);
  LlmcDataset both(dir / "*.bin", 4, 100);
  CHECK(both.num_samples() == 2);
  CHECK(read(both, 0).inputs[0] == 10);
  require_data_error([&] { LlmcDataset(dir / "a.bin", 4, 100); }, "a.bin", DataError::kNoOffset,
                     {"too few tokens", "5 tokens"});
}

TEST_CASE("llmc: malformed shards give DataError with file and offset") {
  TempDir dir;
  const std::string path = dir / "shard.bin";
  auto fresh = [&] { write_llmc_shard(path, iota_tokens(20, 0)); };
  auto open = [&] { LlmcDataset(path, 4, 100); };

  SECTION("glob without a match names the pattern") {
    require_data_error([&] { LlmcDataset(dir / "nothing_*.bin", 4, 100); }, "nothing_*.bin",
                       DataError::kNoOffset, {"expected at least one file matching"});
  }
  SECTION("missing plain path") {
    require_data_error([&] { LlmcDataset(dir / "missing.bin", 4, 100); }, "missing.bin",
                       DataError::kNoOffset);
  }
  SECTION("wrong magic") {
    fresh();
    patch<std::int32_t>(path, 0, 12345);
    require_data_error(open, "shard.bin", 0, {"expected magic 20240520", "found 12345"});
  }
  SECTION("wrong version") {
    fresh();
    patch<std::int32_t>(path, 4, 2);
    require_data_error(open, "shard.bin", 4, {"expected 1", "found 2"});
  }
  SECTION("shorter than the header") {
    fresh();
    resize_file(path, 100);
    require_data_error(open, "shard.bin", 100, {"at least 1024 bytes", "found 100 bytes"});
  }
  SECTION("truncated token data") {
    fresh();
    resize_file(path, 1024 + 2 * 20 - 3);
    require_data_error(open, "shard.bin", 1024 + 2 * 20 - 3,
                       {"truncated", "expected 1064 bytes", "found 1061 bytes"});
  }
  SECTION("trailing bytes") {
    fresh();
    resize_file(path, 1024 + 2 * 20 + 2);
    require_data_error(open, "shard.bin", 1064, {"trailing", "expected 1064 bytes", "found 1066 bytes"});
  }
  SECTION("header count disagrees with the size") {
    fresh();
    patch<std::int32_t>(path, 8, 30);
    require_data_error(open, "shard.bin", 1064, {"30 tokens", "expected 1084 bytes", "found 1064 bytes"});
  }
  SECTION("negative header count") {
    fresh();
    patch<std::int32_t>(path, 8, -1);
    require_data_error(open, "shard.bin", 8, {"found -1"});
  }
  SECTION("one bad shard among good ones is named") {
    write_llmc_shard(dir / "good.bin", iota_tokens(20, 0));
    fresh();
    patch<std::int32_t>(path, 0, 7);
    require_data_error([&] { LlmcDataset(dir / "*.bin", 4, 100); }, "shard.bin", 0);
  }
  SECTION("a directory is not a shard") {
    std::filesystem::create_directory(dir / "dir.bin");
    require_data_error([&] { LlmcDataset(dir / "dir.bin", 4, 100); }, "dir.bin", DataError::kNoOffset,
                       {"regular file"});
  }
}

TEST_CASE("llmc: a token >= vocab is reported lazily, with the byte offset of the token") {
  TempDir dir;
  auto tokens = iota_tokens(20, 0);
  tokens[13] = 60000;
  write_llmc_shard(dir / "s.bin", tokens);
  LlmcDataset ds(dir / "s.bin", 4, 50257);  // opening does not read tokens
  CHECK_NOTHROW(read(ds, 0));
  CHECK_NOTHROW(read(ds, 1));
  // Sample 3 = tokens [12, 17): token 13 is input 1. Sample 2 = [8, 13): token 12 only.
  CHECK_NOTHROW(read(ds, 2));
  require_data_error([&] { read(ds, 3); }, "s.bin", 1024 + 2 * 13, {"expected < 50257", "found 60000"});
  // The last token of a sample (a target only) is checked too: sample 3 of a shard where token 16 is bad.
  tokens[13] = 5;
  tokens[16] = 50257;
  write_llmc_shard(dir / "t.bin", tokens);
  LlmcDataset ds2(dir / "t.bin", 4, 50257);
  require_data_error([&] { read(ds2, 3); }, "t.bin", 1024 + 2 * 16, {"found 50257"});
}
