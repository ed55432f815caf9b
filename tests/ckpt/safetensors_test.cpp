#include "engine/ckpt/safetensors.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/ckpt/checkpoint_error.h"
#include "tests/ckpt/ckpt_test_util.h"

using namespace ptrain::ckpt;
using ptrain::ckpt::testing::TempDir;

namespace {

// Raw safetensors bytes: length prefix (the header's own unless `length` is given), header, data.
std::string st_bytes(const std::string& header, const std::string& data = "", std::uint64_t length = ~0ull) {
  const std::uint64_t n = length == ~0ull ? header.size() : length;
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::span<const std::byte> as_span(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The message of the CheckpointError that parsing `bytes` throws ("" if it parses).
std::string parse_error(const std::string& bytes) {
  try {
    parse_safetensors(as_span(bytes), "bad.safetensors");
  } catch (const CheckpointError& e) {
    CHECK(e.path() == "bad.safetensors");
    return e.what();
  }
  return "";
}

std::string one_f32(const std::string& offsets, const std::string& shape = "[2]") {
  return R"({"t":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

}  // namespace

TEST_CASE("safetensors round trip: dtypes, shapes, metadata", "[ckpt][safetensors]") {
  TempDir tmp;
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<std::uint16_t> bf16 = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(3.0f),
                                           f32_to_bf16(1e10f)};
  const std::vector<std::int32_t> i32 = {1, -2, 3, std::numeric_limits<std::int32_t>::min()};
  const std::vector<std::int64_t> i64 = {std::numeric_limits<std::int64_t>::max(), -1, 42};
  const std::vector<std::uint8_t> u8 = {0, 1, 2, 254, 255};

  SafetensorsWriter w;
  w.add_f32("weights.f32", {2, 3}, f32.data());
  w.add("weights.bf16", StDtype::BF16, {4}, bf16.data(), bf16.size() * 2);
  w.add("ids", StDtype::I32, {2, 2}, i32.data(), i32.size() * 4);
  w.add("big", StDtype::I64, {3}, i64.data(), i64.size() * 8);
  w.add("bytes", StDtype::U8, {5}, u8.data(), u8.size());
  w.add_f32("empty", {0, 4}, nullptr);
  w.add_f32("scalar", {}, f32.data());
  w.set_metadata("format", "pt");
  w.set_metadata("note", "ünïcode ok");
  CHECK(w.header_json().size() % 8 == 0);
  const auto written = w.write(tmp / "a.safetensors");

  SafetensorsFile file(tmp / "a.safetensors");
  CHECK(file.file_bytes().size() == static_cast<std::size_t>(written.bytes));
  CHECK(file.header().data_start % 8 == 0);
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.metadata().at("note") == "ünïcode ok");
  CHECK(file.tensors().size() == 7);

  const StTensorInfo& t = file.get("weights.f32");
  CHECK(t.dtype == StDtype::F32);
  CHECK(t.shape == std::vector<std::int64_t>{2, 3});
  std::vector<float> back(6);
  file.read_f32(t, back.data());
  CHECK(std::memcmp(back.data(), f32.data(), 24) == 0);
  std::vector<float> part(2);
  file.read_f32(t, 2, 2, part.data());
  CHECK(part == std::vector<float>{3.25f, 0.0f});

  const StTensorInfo& b = file.get("weights.bf16");
  CHECK(b.dtype == StDtype::BF16);
  std::vector<float> bf(4);
  file.read_f32(b, bf.data());
  CHECK(bf[0] == 1.0f);
  CHECK(bf[1] == -0.5f);
  CHECK(bf[2] == 3.0f);
  CHECK(std::abs(bf[3] - 1e10f) < 1e10f * 0.01f);

  auto raw_equal = [&](const char* name, const void* data, std::size_t n) {
    const auto bytes = file.data(file.get(name));
    return bytes.size() == n && std::memcmp(bytes.data(), data, n) == 0;
  };
  CHECK(raw_equal("ids", i32.data(), 16));
  CHECK(file.get("ids").dtype == StDtype::I32);
  CHECK(raw_equal("big", i64.data(), 24));
  CHECK(file.get("big").dtype == StDtype::I64);
  CHECK(raw_equal("bytes", u8.data(), 5));
  CHECK(file.get("empty").numel() == 0);
  CHECK(file.get("scalar").shape.empty());
  CHECK(file.get("scalar").numel() == 1);
  CHECK(file.find("nope") == nullptr);
  CHECK_THROWS_AS(file.get("nope"), CheckpointError);
  std::vector<float> ids(4);
  CHECK_THROWS_AS(file.read_f32(file.get("ids"), ids.data()), CheckpointError);  // not a float type
}

TEST_CASE("safetensors writer rejects programming errors", "[ckpt][safetensors]") {
  SafetensorsWriter w;
  const float x[2] = {1, 2};
  w.add_f32("a", {2}, x);
  CHECK_THROWS_AS(w.add_f32("a", {2}, x), std::invalid_argument);
  CHECK_THROWS_AS(w.add_f32("", {2}, x), std::invalid_argument);
  CHECK_THROWS_AS(w.add_f32("__metadata__", {2}, x), std::invalid_argument);
  CHECK_THROWS_AS(w.add("b", StDtype::F32, {3}, x, 8), std::invalid_argument);
}

TEST_CASE("float conversions", "[ckpt][safetensors]") {
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  CHECK(bf16_to_f32(0xC000) == -2.0f);
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(f32_to_bf16(1.00390625f) == 0x3F80);  // tie rounds to even
  CHECK(f32_to_bf16(1.01171875f) == 0x3F82);  // tie rounds to even (up)
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(f16_to_f32(0x3C00) == 1.0f);
  CHECK(f16_to_f32(0xC000) == -2.0f);
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(std::isinf(f16_to_f32(0x7C00)));
  CHECK(std::signbit(f16_to_f32(0x8000)));
}

TEST_CASE("safetensors reader rejects malformed files with CheckpointError", "[ckpt][safetensors]") {
  const std::string eight(8, 'x');                                // data for a F32 [2]
  CHECK(parse_error(st_bytes(one_f32("[0,8]"), eight)).empty());  // the well-formed baseline

  SECTION("too short for the length prefix") {
    CHECK_THAT(parse_error(""), Catch::Contains("too short"));
    CHECK_THAT(parse_error("1234567"), Catch::Contains("byte 0"));
  }
  SECTION("header length absurd or past the end") {
    CHECK_THAT(parse_error(st_bytes("{}", "", 1ull << 40)), Catch::Contains("exceeds the limit"));
    CHECK_THAT(parse_error(st_bytes("{}", "", ~0ull - 1)), Catch::Contains("exceeds the limit"));
    CHECK_THAT(parse_error(st_bytes("{}", "", 1000)), Catch::Contains("runs past the end"));
    CHECK_THAT(parse_error(st_bytes("{}", "", 0)), Catch::Contains("too short"));
  }
  SECTION("not JSON, not UTF-8, not an object") {
    CHECK_THAT(parse_error(st_bytes("{\"t\": nope}")), Catch::Contains("invalid JSON"));
    CHECK_THAT(parse_error(st_bytes("{\"t\": nope}")),
               Catch::Contains("byte 1"));  // offset inside the header
    CHECK_THAT(parse_error(st_bytes("{\"\xff\":1}")), Catch::Contains("UTF-8") && Catch::Contains("byte 10"));
    CHECK_THAT(parse_error(st_bytes("{\"\xc0\xaf\":1}")), Catch::Contains("UTF-8"));  // overlong
    CHECK_THAT(parse_error(st_bytes("[1, 2]")), Catch::Contains("expected a JSON object"));
    CHECK_THAT(parse_error(st_bytes(std::string(100, '[') + std::string(100, ']'))),
               Catch::Contains("nested"));
  }
  SECTION("wrong types and keys in an entry") {
    CHECK_THAT(parse_error(st_bytes(R"({"t": 5})")), Catch::Contains("tensor \"t\": expected an object"));
    CHECK_THAT(parse_error(st_bytes(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", eight)),
               Catch::Contains("missing \"dtype\""));
    CHECK_THAT(
        parse_error(st_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight)),
        Catch::Contains("unexpected key"));
    CHECK_THAT(parse_error(st_bytes(R"({"t":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", eight)),
               Catch::Contains("dtype: expected a string"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,8]", "[-2]"), eight)), Catch::Contains("non-negative"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,8]", "[2.0]"), eight)),
               Catch::Contains("non-negative integers"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,8]", "2"), eight)),
               Catch::Contains("shape: expected an array"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,8,9]"), eight)), Catch::Contains("data_offsets"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[8,0]"), eight)), Catch::Contains("data_offsets"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,\"8\"]"), eight)), Catch::Contains("data_offsets"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,8]", "[4611686018427387904,4]"), eight)),
               Catch::Contains("overflows"));
    CHECK_THAT(parse_error(st_bytes(R"({"__metadata__":{"a":1}})")), Catch::Contains("__metadata__"));
    CHECK_THAT(parse_error(st_bytes(R"({"__metadata__":[]})")), Catch::Contains("__metadata__"));
  }
  SECTION("unknown dtype") {
    CHECK_THAT(parse_error(st_bytes(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", eight)),
               Catch::Contains("unknown dtype \"F33\""));
  }
  SECTION("offsets out of bounds, overlapping, with holes, or not matching the shape") {
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,16]", "[4]"), eight)),
               Catch::Contains("past the end of the data"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,8]", "[3]"), eight)), Catch::Contains("needs 12"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[0,4]", "[1]"), eight)),
               Catch::Contains("after the last tensor"));
    CHECK_THAT(parse_error(st_bytes(one_f32("[4,8]", "[1]"), eight)), Catch::Contains("belong to no tensor"));
    const std::string two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    CHECK_THAT(parse_error(st_bytes(two, eight)), Catch::Contains("overlaps"));
  }
  SECTION("duplicate names") {
    const std::string dup = R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})";
    CHECK_THAT(parse_error(st_bytes(dup, eight)), Catch::Contains("duplicate key \"t\""));
    CHECK_THAT(parse_error(st_bytes(R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                    eight)),
               Catch::Contains("duplicate key \"dtype\""));
  }
}

TEST_CASE("safetensors files on disk: missing, empty, truncated", "[ckpt][safetensors]") {
  TempDir tmp;
  CHECK_THROWS_AS(SafetensorsFile(tmp / "missing.safetensors"), CheckpointError);
  ptrain::ckpt::testing::write_bytes(tmp / "empty.safetensors", "");
  CHECK_THROWS_WITH(SafetensorsFile(tmp / "empty.safetensors"),
                    Catch::Contains("empty.safetensors") && Catch::Contains("too short"));
  CHECK_THROWS_AS(SafetensorsFile(tmp.path()), CheckpointError);  // a directory

  const float x[4] = {1, 2, 3, 4};
  SafetensorsWriter w;
  w.add_f32("x", {4}, x);
  w.write(tmp / "ok.safetensors");
  const std::string good = ptrain::ckpt::testing::read_bytes(tmp / "ok.safetensors");
  ptrain::ckpt::testing::write_bytes(tmp / "cut.safetensors", good.substr(0, good.size() - 1));
  CHECK_THROWS_WITH(SafetensorsFile(tmp / "cut.safetensors"), Catch::Contains("cut.safetensors"));
}

// Every truncation and many single-byte corruptions of a valid file either parse or give a
// CheckpointError: never another exception, never a crash (the fuzzer explores further).
TEST_CASE("safetensors reader survives truncations and byte flips", "[ckpt][safetensors]") {
  const float x[3] = {1, 2, 3};
  const std::int32_t y[2] = {4, 5};
  SafetensorsWriter w;
  w.add_f32("x", {3}, x);
  w.add("y", StDtype::I32, {2}, y, 8);
  w.set_metadata("k", "v");
  const std::string header = w.header_json();
  std::string good(8, '\0');
  const std::uint64_t n = header.size();
  std::memcpy(good.data(), &n, 8);
  good += header;
  good.append(reinterpret_cast<const char*>(x), 12);
  good.append(reinterpret_cast<const char*>(y), 8);
  CHECK(parse_error(good).empty());

  int errors = 0;
  for (std::size_t len = 0; len < good.size(); ++len) {
    CHECK_NOTHROW(errors += !parse_error(good.substr(0, len)).empty());
  }
  CHECK(errors == static_cast<int>(good.size()));  // no prefix of a valid file is valid
  std::uint32_t state = 12345;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = good;
    state = state * 1664525u + 1013904223u;
    const std::size_t at = (state >> 8) % bad.size();
    state = state * 1664525u + 1013904223u;
    bad[at] = static_cast<char>(state >> 24);
    CHECK_NOTHROW(parse_error(bad));
  }
}
