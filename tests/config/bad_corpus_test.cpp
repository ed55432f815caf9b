// The corpora under tests/config: every bad/ file holds exactly one problem, every warn/ file
// exactly one warning, every good/ file loads clean. The first line of a bad/ or warn/ file reads
// `# expect: <key> | <text the formatted diagnostic contains>`; the line marked `# <-` is where
// the diagnostic must point (no marker: line 0).
#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/config/config_test_support.h"

namespace ptrain::config::testing {
namespace {

struct Expectation {
  std::string key;
  std::string text;
  int line = 0;
};

std::string trimmed(const std::string& text) {
  std::size_t begin = text.find_first_not_of(' ');
  std::size_t end = text.find_last_not_of(' ');
  return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
}

std::optional<Expectation> read_expectation(const std::string& yaml) {
  const std::string prefix = "# expect: ";
  if (yaml.rfind(prefix, 0) != 0) return std::nullopt;
  std::string first_line = yaml.substr(prefix.size(), yaml.find('\n') - prefix.size());
  std::size_t bar = first_line.find(" | ");
  if (bar == std::string::npos) return std::nullopt;
  Expectation expectation{trimmed(first_line.substr(0, bar)), trimmed(first_line.substr(bar + 3))};
  int line = 1;
  for (std::size_t start = 0; start < yaml.size(); ++line) {
    std::size_t end = yaml.find('\n', start);
    if (yaml.substr(start, end - start).find("# <-") != std::string::npos) expectation.line = line;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return expectation;
}

void check_one(const Diagnostic& got, const Expectation& want, const std::string& path) {
  CHECK(got.key == want.key);
  CHECK(got.line == want.line);
  CHECK_THAT(got.format(), Catch::Contains(want.text));
  CHECK(got.origin == path);
  if (got.line > 0) CHECK(got.column >= 1);
}

}  // namespace

TEST_CASE("each bad config reports exactly its one problem, located and explained", "[config][corpus]") {
  std::vector<std::string> paths = corpus_files("bad");
  REQUIRE(paths.size() >= 100);
  for (const std::string& path : paths) {
    CAPTURE(path);
    std::optional<Expectation> want = read_expectation(read_text(path));
    REQUIRE(want);
    LoadResult result = load_file(path);
    CAPTURE(describe_all(result.diags));
    REQUIRE(result.diags.errors.size() == 1);
    check_one(result.diags.errors.front(), *want, path);
  }
}

TEST_CASE("each warn config loads with exactly its one warning", "[config][corpus]") {
  std::vector<std::string> paths = corpus_files("warn");
  REQUIRE(paths.size() >= 10);
  for (const std::string& path : paths) {
    CAPTURE(path);
    std::optional<Expectation> want = read_expectation(read_text(path));
    REQUIRE(want);
    LoadResult result = load_file(path);
    CAPTURE(describe_all(result.diags));
    CHECK(result.ok());
    REQUIRE(result.diags.warnings.size() == 1);
    check_one(result.diags.warnings.front(), *want, path);
  }
}

TEST_CASE("good configs and the shipped configs load without errors", "[config][corpus]") {
  std::vector<std::string> paths = corpus_files("good");
  std::filesystem::path shipped = std::filesystem::path(PTRAIN_CONFIG_TEST_DIR) / ".." / ".." / "configs";
  if (std::filesystem::is_directory(shipped)) {
    for (const auto& entry : std::filesystem::directory_iterator(shipped)) {
      if (entry.path().extension() == ".yaml") paths.push_back(entry.path().string());
    }
  }
  for (const std::string& path : paths) {
    CAPTURE(path);
    LoadResult result = load_file(path);
    CAPTURE(describe_all(result.diags));
    CHECK(result.ok());
  }
}

}  // namespace ptrain::config::testing
