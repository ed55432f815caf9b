// MegatronDataset: exact read-back for every integer dtype, samples spanning documents, and a
// DataError naming file and offset for malformed .idx/.bin pairs.
#include "engine/data/megatron_dataset.h"

#include <catch2/catch.hpp>
#include <vector>

#include "engine/data/writers.h"
#include "tests/data/data_test_support.h"

using ptrain::data::DataError;
using ptrain::data::MegatronDataset;
using ptrain::data::MegatronDtype;
using ptrain::data::write_megatron_dataset;
using ptrain::data::testing::patch;
using ptrain::data::testing::read_bytes;
using ptrain::data::testing::require_data_error;
using ptrain::data::testing::resize_file;
using ptrain::data::testing::TempDir;
using ptrain::data::testing::write_bytes;

namespace {

// Documents of 3, 0, 5, 1 and 4 tokens: the stream is 0..12 shifted by `base`.
std::vector<std::vector<std::int64_t>> documents(std::int64_t base) {
  std::vector<std::vector<std::int64_t>> docs = {{0, 1, 2}, {}, {3, 4, 5, 6, 7}, {8}, {9, 10, 11, 12}};
  for (auto& d : docs) {
    for (auto& t : d) t += base;
  }
  return docs;
}

std::vector<std::int32_t> stream_of(const ptrain::data::TokenSource& ds, std::int64_t index) {
  const int T = ds.seq_len();
  std::vector<std::int32_t> in(static_cast<std::size_t>(T)), tg(static_cast<std::size_t>(T));
  ds.read_sample(index, in.data(), tg.data());
  for (int j = 0; j + 1 < T; ++j)
    REQUIRE(tg[static_cast<std::size_t>(j)] == in[static_cast<std::size_t>(j) + 1]);
  in.push_back(tg.back());
  return in;
}

// Byte offsets in an .idx with S sequences.
constexpr std::size_t kSizesAt = 34;
std::size_t pointers_at(std::size_t S) {
  return kSizesAt + 4 * S;
}
std::size_t docs_at(std::size_t S) {
  return kSizesAt + 12 * S;
}

}  // namespace

TEST_CASE("megatron: every integer dtype reads back exactly, documents forming one stream") {
  const auto dtype = GENERATE(MegatronDtype::UInt8, MegatronDtype::Int8, MegatronDtype::Int16,
                              MegatronDtype::UInt16, MegatronDtype::Int32, MegatronDtype::Int64);
  INFO("dtype " << ptrain::data::to_string(dtype));
  TempDir dir;
  const std::int64_t base = 100;  // fits int8
  write_megatron_dataset(dir / "ds", documents(base), dtype);
  MegatronDataset ds(dir / "ds", 4, 1000);
  CHECK(ds.dtype() == dtype);
  CHECK(ds.num_sequences() == 5);
  CHECK(ds.num_documents() == 5);
  CHECK(ds.num_tokens() == 13);
  CHECK(ds.num_samples() == 3);  // floor(12 / 4)
  for (std::int64_t i = 0; i < 3; ++i) {
    const std::int32_t f = static_cast<std::int32_t>(base + 4 * i);
    CHECK(stream_of(ds, i) == std::vector<std::int32_t>{f, f + 1, f + 2, f + 3, f + 4});
  }
  CHECK_THROWS_AS(stream_of(ds, 3), std::out_of_range);
}

TEST_CASE("megatron: large token ids (uint16, int32) and T = 1") {
  TempDir dir;
  write_megatron_dataset(dir / "big", {{50000, 50255}, {65535}}, MegatronDtype::UInt16);
  MegatronDataset ds(dir / "big", 1, 65536);
  CHECK(ds.num_samples() == 2);
  CHECK(stream_of(ds, 0) == std::vector<std::int32_t>{50000, 50255});
  CHECK(stream_of(ds, 1) == std::vector<std::int32_t>{50255, 65535});
  write_megatron_dataset(dir / "wide", {{128000, 128255, 7}}, MegatronDtype::Int32);
  MegatronDataset wide(dir / "wide", 2, 128256);
  CHECK(stream_of(wide, 0) == std::vector<std::int32_t>{128000, 128255, 7});
}

TEST_CASE("megatron: out-of-vocab and negative tokens are reported with the .bin offset") {
  TempDir dir;
  write_megatron_dataset(dir / "v", {{1, 2, 3}, {4, 999, 6, 7, 8}}, MegatronDtype::Int32);
  MegatronDataset ds(dir / "v", 2, 500);
  CHECK_NOTHROW(stream_of(ds, 0));                                               // tokens 0..2
  require_data_error([&] { stream_of(ds, 2); }, "v.bin", 4 * 4, {"found 999"});  // token 4
  write_megatron_dataset(dir / "n", {{1, 2, -3, 4}}, MegatronDtype::Int16);
  MegatronDataset neg(dir / "n", 3, 500);
  require_data_error([&] { stream_of(neg, 0); }, "n.bin", 2 * 2, {"expected 0 <= id < 500", "found -3"});
}

TEST_CASE("megatron: malformed index or data gives DataError with file and offset") {
  TempDir dir;
  const std::string prefix = dir / "ds";
  const std::string idx = prefix + ".idx";
  const std::string bin = prefix + ".bin";
  write_megatron_dataset(prefix, documents(0), MegatronDtype::UInt16);  // S = 5, D = 6
  const std::size_t S = 5;
  auto open = [&] { MegatronDataset(prefix, 4, 1000); };

  SECTION("missing .idx") {
    std::filesystem::remove(idx);
    require_data_error(open, "ds.idx", DataError::kNoOffset, {"cannot open"});
  }
  SECTION("missing .bin") {
    std::filesystem::remove(bin);
    require_data_error(open, "ds.bin", DataError::kNoOffset, {"cannot open"});
  }
  SECTION("wrong magic") {
    patch<char>(idx, 1, 'X');
    require_data_error(open, "ds.idx", 0, {"expected magic", "MXIDIDX"});
  }
  SECTION("wrong version") {
    patch<std::uint64_t>(idx, 9, 2);
    require_data_error(open, "ds.idx", 9, {"expected 1, found 2"});
  }
  SECTION("float dtypes are rejected") {
    for (const std::uint8_t code : {6, 7}) {
      patch<std::uint8_t>(idx, 17, code);
      require_data_error(open, "ds.idx", 17, {"integer token type", "float"});
    }
  }
  SECTION("unknown dtype code") {
    patch<std::uint8_t>(idx, 17, 9);
    require_data_error(open, "ds.idx", 17, {"found 9"});
  }
  SECTION("truncated header") {
    resize_file(idx, 20);
    require_data_error(open, "ds.idx", 20, {"at least 34 bytes", "found 20 bytes"});
  }
  SECTION("truncated arrays") {
    resize_file(idx, docs_at(S) + 8);
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(docs_at(S) + 8),
                       {"truncated", "5 sequences"});
  }
  SECTION("absurd sequence count") {
    patch<std::uint64_t>(idx, 18, std::uint64_t{1} << 62);
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(docs_at(S) + 48), {"truncated"});
  }
  SECTION("trailing bytes in .idx") {
    auto bytes = read_bytes(idx);
    bytes.resize(bytes.size() + 3);
    write_bytes(idx, bytes);
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(docs_at(S) + 48), {"trailing", "found"});
  }
  SECTION("pointer beyond the end of .bin") {
    patch<std::int64_t>(idx, pointers_at(S) + 8 * 4, 1000);
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(pointers_at(S) + 32),
                       {"out of bounds", "ds.bin", "found 26 bytes"});
  }
  SECTION("size running past the end of .bin") {
    patch<std::int32_t>(idx, kSizesAt + 4 * 4, 5);  // last sequence: 4 -> 5 tokens
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(pointers_at(S) + 32), {"out of bounds"});
  }
  SECTION("negative size") {
    patch<std::int32_t>(idx, kSizesAt + 4 * 2, -1);
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(kSizesAt + 8), {"found -1"});
  }
  SECTION("pointers not ascending (overlapping sequences)") {
    patch<std::int64_t>(idx, pointers_at(S) + 8 * 2, 2);
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(pointers_at(S) + 16), {"ascend", "found 2"});
  }
  SECTION("truncated .bin") {
    resize_file(bin, 20);  // the last sequence (4 tokens at byte 18) no longer fits
    require_data_error(open, "ds.idx", static_cast<std::int64_t>(pointers_at(S) + 32),
                       {"out of bounds", "at least 26 bytes", "found 20 bytes"});
  }
  SECTION("trailing bytes in .bin") {
    resize_file(bin, 30);
    require_data_error(open, "ds.bin", 26, {"trailing", "found 30 bytes"});
  }
  SECTION("document indices must start at 0, ascend and end at the sequence count") {
    SECTION("first") {
      patch<std::int64_t>(idx, docs_at(S), 1);
      require_data_error(open, "ds.idx", static_cast<std::int64_t>(docs_at(S)), {"expected 0, found 1"});
    }
    SECTION("descending") {
      patch<std::int64_t>(idx, docs_at(S) + 16, 0);
      require_data_error(open, "ds.idx", static_cast<std::int64_t>(docs_at(S) + 16), {"found 0"});
    }
    SECTION("last") {
      patch<std::int64_t>(idx, docs_at(S) + 40, 4);
      require_data_error(open, "ds.idx", static_cast<std::int64_t>(docs_at(S) + 40),
                         {"the sequence count 5", "found 4"});
    }
  }
  SECTION("too few tokens for one sample") {
    write_megatron_dataset(prefix, {{1, 2}, {3}}, MegatronDtype::UInt16);
    require_data_error(open, "ds.bin", DataError::kNoOffset, {"too few tokens", "3"});
  }
  SECTION("empty files") {
    resize_file(idx, 0);
    require_data_error(open, "ds.idx", 0, {"at least 34 bytes"});
  }
}
