// Inputs that must never crash, hang or throw: each gives diagnostics (binary inputs are generated
// here rather than committed).
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/config/config_test_support.h"
#include "tests/temp_dir.h"

namespace ptrain::config::testing {
namespace {

// Loads `text`, requires a clean failure, and returns the first error's formatted text.
std::string first_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  LoadResult result;
  REQUIRE_NOTHROW(result = load(text, overrides));
  REQUIRE_FALSE(result.ok());
  return result.diags.errors.front().format();
}

void require_well_formed(const LoadResult& result) {
  for (const Diagnostic& d : result.diags.errors) {
    CHECK_FALSE(d.message.empty());
    CHECK(d.line >= 0);
    CHECK(d.column >= 0);
    CHECK(d.key.size() <= 200);
    CHECK(d.message.size() <= 2000);
  }
}

double seconds_to_load(const std::string& text) {
  auto start = std::chrono::steady_clock::now();
  LoadResult result = load(text);
  require_well_formed(result);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string repeated(const std::string& piece, std::size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (std::size_t i = 0; i < times; ++i) out += piece;
  return out;
}

}  // namespace

TEST_CASE("empty and blank documents are reported as empty", "[config][crash]") {
  for (const std::string text :
       {"", " ", "\n\n\n", "# only a comment\n", "---\n", "---\n...\n", "~", "null"}) {
    CAPTURE(text);
    CHECK_THAT(first_error(text), Catch::Contains("the job spec is empty"));
  }
}

TEST_CASE("a stray top-level comma is an error, not yaml-cpp 0.7's endless loop", "[config][crash]") {
  // Found by the token-soup test below: YAML::LoadAll(",") allocates empty documents forever.
  for (const std::string text : {",", " ,", "!!str ,", ",\nname: tiny\n", "# comment\n, x"}) {
    CAPTURE(text);
    CHECK_THAT(first_error(text), Catch::Contains("invalid YAML: unexpected ','"));
  }
}

TEST_CASE("non-mapping top levels are reported", "[config][crash]") {
  CHECK_THAT(first_error("- 1\n- 2\n"), Catch::Contains("the top level must be a mapping"));
  CHECK_THAT(first_error("42"), Catch::Contains("got 42"));
  CHECK_THAT(first_error("[name, tiny]"), Catch::Contains("got a list"));
  CHECK_THAT(first_error("'just a string'"), Catch::Contains("got the string \"just a string\""));
}

TEST_CASE("bad bytes are located and rejected before the parser", "[config][crash]") {
  CHECK_THAT(first_error(std::string("name: a\0b\n", 10)),
             Catch::Contains("job.yaml:1:8: control byte \\x00"));
  CHECK_THAT(first_error("name: x\nmodel: \x01\n"), Catch::Contains("job.yaml:2:8: control byte \\x01"));
  CHECK_THAT(first_error("name: caf\xe9\n"), Catch::Contains("job.yaml:1:10: the text is not valid UTF-8"));
  CHECK_THAT(first_error("name: \xc0\xaf\n"), Catch::Contains("not valid UTF-8"));          // overlong '/'
  CHECK_THAT(first_error("name: \xed\xa0\x80\n"), Catch::Contains("not valid UTF-8"));      // surrogate
  CHECK_THAT(first_error("name: \xf4\x90\x80\x80\n"), Catch::Contains("not valid UTF-8"));  // > U+10FFFF
  CHECK_THAT(first_error("name: \xe2\x82"), Catch::Contains("not valid UTF-8"));            // cut short
  CHECK_THAT(first_error(std::string("\xff\xfen\0a\0m\0e\0", 10)), Catch::Contains("UTF-16 or UTF-32"));
}

TEST_CASE("valid UTF-8 and a UTF-8 byte-order mark are fine", "[config][crash]") {
  LoadResult accented = load("name: llama-\xc3\xbc-\xe2\x9c\x93\n");
  CHECK(accented.ok());
  CHECK(accented.spec.name == "llama-\xc3\xbc-\xe2\x9c\x93");
  LoadResult bom = load("\xef\xbb\xbfname: tiny\n");
  CHECK(bom.ok());
  CHECK(bom.spec.name == "tiny");
}

TEST_CASE("random bytes never crash", "[config][crash]") {
  std::mt19937 random(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 300);
  for (int round = 0; round < 3000; ++round) {
    std::string text(static_cast<std::size_t>(length(random)), '\0');
    for (char& c : text) c = static_cast<char>(byte(random));
    LoadResult result;
    REQUIRE_NOTHROW(result = load(text, {text.substr(0, text.size() / 4)}));
    require_well_formed(result);
  }
}

TEST_CASE("random YAML token soup never crashes", "[config][crash]") {
  const std::vector<std::string> tokens = {"{",
                                           "}",
                                           "[",
                                           "]",
                                           ": ",
                                           "- ",
                                           ", ",
                                           "\n",
                                           "  ",
                                           "&a ",
                                           "*a",
                                           "&b ",
                                           "*b",
                                           "? ",
                                           "#c",
                                           "\"",
                                           "'",
                                           "|\n",
                                           ">\n",
                                           "!!str ",
                                           "!!int ",
                                           "!x ",
                                           "---\n",
                                           "...\n",
                                           "%YAML 1.2\n",
                                           "<<: ",
                                           "null",
                                           "~",
                                           "true",
                                           "1",
                                           "-1",
                                           "2.5",
                                           "1e999",
                                           "99999999999999999999",
                                           ".inf",
                                           "model",
                                           "parallel",
                                           "tp",
                                           "layers",
                                           "schedule",
                                           "layers_per_stage",
                                           "betas",
                                           "moe",
                                           "name",
                                           "dp",
                                           "auto",
                                           "order",
                                           "tp-cp-ep-dp-pp",
                                           "arch",
                                           "mixtral",
                                           "optimizer",
                                           "\t",
                                           "\\"};
  std::mt19937 random(7);
  std::uniform_int_distribution<std::size_t> pick(0, tokens.size() - 1);
  std::uniform_int_distribution<int> count(1, 60);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    for (int i = count(random); i > 0; --i) text += tokens[pick(random)];
    LoadResult result;
    REQUIRE_NOTHROW(result =
                        load(text, {"parallel.tp=" + text.substr(0, 20), "model=" + text.substr(0, 30)}));
    require_well_formed(result);
  }
}

TEST_CASE("deep nesting is refused without overflowing the stack", "[config][crash]") {
  CHECK_THAT(first_error(repeated("[", 100000)), Catch::Contains("nested deeper than"));
  CHECK_THAT(first_error(repeated("{a: ", 100000)), Catch::Contains("nested deeper than"));
  CHECK_THAT(first_error("model: " + repeated("[", 100000)), Catch::Contains("nested deeper than"));
  std::string block_lists;
  for (int depth = 0; depth < 1500; ++depth)
    block_lists += std::string(static_cast<std::size_t>(depth), ' ') + "-\n";
  CHECK_THAT(first_error(block_lists), Catch::Contains("job.yaml:"));
  std::string block_maps;
  for (int depth = 0; depth < 1500; ++depth)
    block_maps += std::string(static_cast<std::size_t>(depth), ' ') + "a:\n";
  CHECK_THAT(first_error(block_maps), Catch::Contains("job.yaml:"));
  CHECK_THAT(first_error("name: tiny", {"model=" + repeated("[", 100000)}),
             Catch::Contains("nested deeper than"));
}

TEST_CASE("alias bombs are never expanded", "[config][crash]") {
  // 10^30 leaves if expanded; every reader position that takes a list or mapping is tried.
  std::string anchors =
      "name: tiny\nmodel:\n  arch: mixtral\n  ffn_hidden: 2048\n  moe:\n    experts:\n      - &l0 [x, x, x, "
      "x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 30; ++level) {
    std::string previous = "*l" + std::to_string(level - 1);
    anchors += "      - &l" + std::to_string(level) + " [" + repeated(previous + ", ", 9) + previous + "]\n";
  }
  for (const std::string tail : {"schedule: {layers_per_stage: *l29}\n", "optimizer: {betas: *l29}\n",
                                 "cluster: *l29\n", "? *l29\n: 1\n", "data: {train: *l29}\n"}) {
    CAPTURE(tail);
    LoadResult result;
    auto start = std::chrono::steady_clock::now();
    REQUIRE_NOTHROW(result = load(anchors + tail));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    CHECK_FALSE(result.ok());
    require_well_formed(result);
  }
}

TEST_CASE("huge numbers and long scalars are errors, shown cut short", "[config][crash]") {
  std::string digits = repeated("9", 10000);
  std::string error = first_error("name: tiny\nparallel:\n  tp: " + digits + "\n");
  CHECK_THAT(error, Catch::Contains("parallel.tp: is too large: must be <= 2147483647, got 9999"));
  CHECK(error.size() < 300);
  CHECK_THAT(first_error("name: tiny\noptimizer:\n  lr: 1" + repeated("0", 400) + "\n"),
             Catch::Contains("out of the range of a 64-bit float"));
  CHECK_THAT(first_error("name: tiny\nparallel:\n  tp: -" + digits + "\n"), Catch::Contains("must be >= 1"));
  std::string long_key = repeated("k", 100000);
  std::string unknown = first_error("name: tiny\n" + long_key + ": 1\n");
  CHECK(unknown.size() < 1000);
}

TEST_CASE("text over 4 MiB is refused, in memory and on disk", "[config][crash]") {
  std::string big = "name: tiny\n" + repeated("#", kMaxJobBytes);
  CHECK_THAT(first_error(big), Catch::Contains("the limit for a job spec is 4194304 bytes"));

  const ptrain::test::TempDir dir("ptrain-config-test");
  const std::string path = dir / "big.yaml";
  {
    std::ofstream file(path, std::ios::binary);
    file << big;
  }
  LoadResult from_file = load_file(path);
  REQUIRE(from_file.diags.errors.size() == 1);
  CHECK_THAT(from_file.diags.errors.front().message, Catch::Contains("larger than 4194304 bytes"));
}

TEST_CASE("documents with too many values are refused before nodes are built", "[config][crash]") {
  // About a gigabyte of yaml-cpp nodes if built; refused after a cheap event pass instead.
  std::string flow = "name: tiny\nschedule:\n  layers_per_stage: [" + repeated("1,", 2000000) + "1]\n";
  CHECK_THAT(first_error(flow), Catch::Contains("job.yaml:3:"));
  CHECK_THAT(first_error(flow), Catch::Contains("the YAML holds more than 65536 values"));
  CHECK(seconds_to_load(flow) < 10.0);
  std::string block = "name: tiny\nx:\n" + repeated("- 1\n", 1000000);
  CHECK_THAT(first_error(block), Catch::Contains("the YAML holds more than 65536 values"));
}

TEST_CASE("a file just under the limit loads in reasonable time", "[config][crash]") {
  std::string padded = "name: tiny\n" + repeated("# padding comment to fill the file up\n", 100000);
  padded.resize(kMaxJobBytes - 1, '#');
  CHECK(seconds_to_load(padded) < 10.0);
  CHECK(load(padded).ok());
}

TEST_CASE("thousands of problems are capped, with a count of the rest", "[config][crash]") {
  std::string many = "name: tiny\n";
  for (int i = 0; i < 5000; ++i) many += "unknown_" + std::to_string(i) + ": 1\n";
  LoadResult result = load(many);
  REQUIRE(result.diags.errors.size() == 101);
  CHECK(result.diags.errors.back().message == "4900 more errors not shown");
  CHECK(seconds_to_load(many) < 5.0);

  LoadResult list = load("name: tiny\nschedule:\n  layers_per_stage: [" + repeated("0, ", 3000) + "0]\n");
  CHECK(list.diags.errors.size() == 101);
}

TEST_CASE("load_file reports missing paths and directories", "[config][crash]") {
  LoadResult missing = load_file("/nonexistent/dir/job.yaml");
  REQUIRE(missing.diags.errors.size() == 1);
  CHECK(missing.diags.errors.front().format() ==
        "/nonexistent/dir/job.yaml: the job file does not exist (fix: check the path)");

  std::string directory = std::filesystem::temp_directory_path().string();
  LoadResult is_directory = load_file(directory);
  REQUIRE(is_directory.diags.errors.size() == 1);
  CHECK_THAT(is_directory.diags.errors.front().message, Catch::Contains("is a directory"));
}

}  // namespace ptrain::config::testing
