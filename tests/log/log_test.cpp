// The lines themselves: time, who and level on each, a record of several lines as that many lines,
// levels by subsystem, the terminal of a rank other than 0 at warnings by default, and files that
// keep an earlier run's lines.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/log/log.h"
#include "tests/temp_dir.h"

using namespace ptrain;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

log::Identity rank(int r, int world, int local) {
  log::Identity who;
  who.host = "node3";
  who.rank = r;
  who.world = world;
  who.local_rank = local;
  return who;
}

// What the loggers write to stderr while `body` runs.
template <class F>
std::string stderr_of(const test::TempDir& dir, F body) {
  const std::string path = dir / "stderr.txt";
  const int saved = ::dup(2);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  body();
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("every line carries the time, the rank with its host and local rank, the subsystem and the level",
          "[log]") {
  test::TempDir dir("ptrain-log-test");
  log::set_levels(log::parse_levels("debug"));
  log::set_identity(rank(1, 2, 1));
  const std::string file = dir / "logs/rank_1.log";
  log::add_file(file);  // the directory is created
  log::comm().info("hello {}", 42);
  log::train().warn("first\nsecond\n");  // one record of two lines: two lines, each with the prefix
  log::ckpt().debug("detail");
  log::data().trace("finer than debug: not shown");
  const std::vector<std::string> lines = lines_of(file);
  REQUIRE(lines.size() == 4);
  const std::string time = R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z )";
  CHECK(std::regex_match(lines[0], std::regex(time + R"(\[rank 1/2 node3 local 1\] comm info: hello 42)")));
  CHECK(std::regex_match(lines[1], std::regex(time + R"(\[rank 1/2 node3 local 1\] train warning: first)")));
  CHECK(std::regex_match(lines[2], std::regex(time + R"(\[rank 1/2 node3 local 1\] train warning: second)")));
  CHECK(std::regex_match(lines[3], std::regex(time + R"(\[rank 1/2 node3 local 1\] ckpt debug: detail)")));

  SECTION("a later run appends to the file, keeping the earlier run's lines") {
    log::set_levels(log::parse_levels("warn,store=info"));
    log::set_identity(rank(1, 2, 1));
    log::add_file(file);
    log::store().info("second run");
    log::comm().info("below warn: not written");
    log::launch().error("failed");
    const std::vector<std::string> again = lines_of(file);
    REQUIRE(again.size() == 6);
    CHECK(std::vector<std::string>(again.begin(), again.begin() + 4) == lines);
    CHECK_THAT(again[4], Catch::EndsWith("store info: second run"));
    CHECK_THAT(again[5], Catch::EndsWith("launch error: failed"));
  }
}

TEST_CASE("by default a rank other than 0 shows only warnings on the terminal, its notes in its file", "[log]") {
  test::TempDir dir("ptrain-log-test");
  log::set_levels(log::parse_levels(""));
  log::set_identity(rank(1, 2, 1));
  log::add_file(dir / "rank_1.log");
  const std::string terminal = stderr_of(dir, [] {
    log::train().info("a note");
    log::train().debug("below info");
    log::train().warn("a warning");
  });
  CHECK_THAT(terminal, !Catch::Contains("a note") && Catch::Contains("train warning: a warning"));
  const std::vector<std::string> file = lines_of(dir / "rank_1.log");
  REQUIRE(file.size() == 2);
  CHECK_THAT(file[0], Catch::EndsWith("train info: a note"));

  SECTION("rank 0 shows its notes") {
    log::set_levels(log::parse_levels(""));
    log::set_identity(rank(0, 2, 0));
    CHECK_THAT(stderr_of(dir, [] { log::train().info("a note"); }),
               Catch::Contains("[rank 0/2 node3 local 0] train info: a note"));
  }
  SECTION("PTRAIN_LOG_LEVEL set: every rank shows what its loggers pass") {
    log::set_levels(log::parse_levels("info"));
    log::set_identity(rank(1, 2, 1));
    CHECK_THAT(stderr_of(dir, [] { log::train().info("a note"); }), Catch::Contains("train info: a note"));
  }
  SECTION("the local launcher says so in place of a rank") {
    log::Identity launcher;
    launcher.host = "node3";
    launcher.role = "launcher";
    log::set_levels(log::parse_levels(""));
    log::set_identity(launcher);
    CHECK_THAT(stderr_of(dir, [] { log::launch().info("spawned"); }),
               Catch::Contains("[launcher node3] launch info: spawned"));
  }
  SECTION("a route takes the terminal's lines while it lives") {
    std::string routed;
    const std::string unrouted = stderr_of(dir, [&] {
      {
        const log::TerminalRoute route([&](std::string text) { routed += text; });
        log::launch().warn("one\ntwo");
      }
      log::launch().warn("three");
    });
    CHECK_THAT(routed, Catch::Contains("launch warning: one\n") && Catch::EndsWith("launch warning: two\n"));
    CHECK_THAT(unrouted, !Catch::Contains("one") && Catch::Contains("launch warning: three\n"));
  }
}
