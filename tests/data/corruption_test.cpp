// Randomly corrupted files: opening and reading every sample either works or throws DataError:
// never a crash, a hang or another exception (run under ASan/UBSan to see out-of-bounds reads).
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "engine/data/llmc_dataset.h"
#include "engine/data/megatron_dataset.h"
#include "engine/data/writers.h"
#include "tests/data/data_test_support.h"

using ptrain::data::DataError;
using ptrain::data::TokenSource;
using ptrain::data::testing::read_bytes;
using ptrain::data::testing::TempDir;
using ptrain::data::testing::write_bytes;

namespace {

// Flips a few bytes (biased towards the header) or truncates / extends the file.
std::vector<std::byte> mutate(std::vector<std::byte> bytes, std::mt19937_64& rng, std::size_t header) {
  const auto kind = rng() % 4;
  if (kind == 0 && !bytes.empty()) {
    bytes.resize(rng() % bytes.size());
  } else if (kind == 1) {
    bytes.resize(bytes.size() + 1 + rng() % 16, std::byte{0x7f});
  } else {
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips && !bytes.empty(); ++i) {
      const std::size_t limit = (kind == 2 && header > 0) ? std::min(header, bytes.size()) : bytes.size();
      bytes[rng() % limit] = static_cast<std::byte>(rng() & 0xff);
    }
  }
  return bytes;
}

// Opens with `open` and reads every sample; returns true if all of it worked.
template <typename Open>
bool open_and_read_all(Open open) {
  try {
    const auto source = open();
    const TokenSource& s = *source;
    std::vector<std::int32_t> in(static_cast<std::size_t>(s.seq_len())), tg(in.size());
    for (std::int64_t i = 0; i < s.num_samples(); ++i) s.read_sample(i, in.data(), tg.data());
    return true;
  } catch (const DataError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("corruption: llm.c shards never crash the reader") {
  TempDir dir;
  std::vector<std::uint16_t> tokens(300);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i * 7 % 500);
  const std::string path = dir / "s.bin";
  ptrain::data::write_llmc_shard(path, tokens);
  const auto good = read_bytes(path);
  std::mt19937_64 rng(2024);
  int failures = 0;
  for (int trial = 0; trial < 100; ++trial) {
    write_bytes(path, mutate(good, rng, 1024 + 64));
    failures +=
        !open_and_read_all([&] { return std::make_unique<ptrain::data::LlmcDataset>(path, 16, 500); });
  }
  CHECK(failures > 0);
}

TEST_CASE("corruption: Megatron .idx/.bin pairs never crash the reader") {
  TempDir dir;
  const std::string prefix = dir / "m";
  std::vector<std::vector<std::int64_t>> docs;
  for (int d = 0; d < 20; ++d) docs.push_back(std::vector<std::int64_t>(static_cast<std::size_t>(d % 7), d));
  ptrain::data::write_megatron_dataset(prefix, docs, ptrain::data::MegatronDtype::Int32);
  const auto good_idx = read_bytes(prefix + ".idx");
  const auto good_bin = read_bytes(prefix + ".bin");
  std::mt19937_64 rng(7);
  int failures = 0;
  for (int trial = 0; trial < 160; ++trial) {
    const bool idx_side = trial % 4 != 0;
    write_bytes(prefix + ".idx", idx_side ? mutate(good_idx, rng, good_idx.size()) : good_idx);
    write_bytes(prefix + ".bin", idx_side ? good_bin : mutate(good_bin, rng, 0));
    failures +=
        !open_and_read_all([&] { return std::make_unique<ptrain::data::MegatronDataset>(prefix, 4, 20); });
  }
  CHECK(failures > 0);
}
