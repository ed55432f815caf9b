#include "engine/ckpt/dir_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>

#include "engine/ckpt/checkpoint_error.h"
#include "tests/ckpt/ckpt_test_util.h"

using namespace ptrain::ckpt;
using ptrain::ckpt::testing::error_of;
using ptrain::ckpt::testing::read_bytes;
using ptrain::ckpt::testing::TempDir;
using ptrain::ckpt::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

std::string refusal_of(const std::string& dir) {
  return error_of([&] { CheckpointDirLock lock(dir); });
}

}  // namespace

TEST_CASE("a checkpoint directory is held by one job at a time", "[ckpt][lock]") {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  auto first = std::make_unique<CheckpointDirLock>(dir);
  CHECK(first->lock_path() == dir + "/job.lock");
  CHECK(first->warnings().empty());
  CHECK_THAT(read_bytes(dir + "/job.lock"), Catch::Contains("pid=" + std::to_string(::getpid())));
  const std::string refused = refusal_of(dir);
  CHECK_THAT(refused, Catch::Contains(dir + "/job.lock") && Catch::Contains("in use by another job") &&
                          Catch::Contains("pid " + std::to_string(::getpid())));
  first.reset();  // released: emptied, free for the next job, which finds nothing stale
  CHECK(read_bytes(dir + "/job.lock").empty());
  CheckpointDirLock second(dir);
  CHECK(second.warnings().empty());
}

TEST_CASE("a lock its holder did not release is stale and taken over, saying whose", "[ckpt][lock]") {
  TempDir tmp;
  write_bytes(tmp / "job.lock", "host=elsewhere pid=4242 started=2024-01-01T00:00:00Z\n");
  CheckpointDirLock lock(tmp.path());
  REQUIRE(lock.warnings().size() == 1);
  CHECK_THAT(lock.warnings()[0], Catch::Contains("stale lock of host elsewhere, pid 4242 (since 2024-01-01"));
}

TEST_CASE("claiming a checkpoint directory checks it and clears what crashed saves left", "[ckpt][lock]") {
  TempDir tmp;
  fs::create_directories(tmp / "ckpt/step_3.tmp-0123456789abcdef");
  fs::create_directories(tmp / "ckpt/step_2");
  write_bytes(tmp / "ckpt/latest.tmp-deadbeef", "step_3");
  { CheckpointDirLock lock(tmp / "ckpt"); }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp / "ckpt")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"job.lock", "step_2"});

  write_bytes(tmp / "a-file", "x");
  CHECK_THAT(refusal_of(tmp / "a-file"), Catch::Contains("checkpoint.dir is not a directory"));
  CHECK_THAT(refusal_of(tmp / "a-file/ckpt"), Catch::Contains("cannot create checkpoint.dir"));
  if (::geteuid() != 0) {  // root writes into read-only directories
    fs::create_directories(tmp / "read-only");
    fs::permissions(tmp / "read-only", fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THAT(refusal_of(tmp / "read-only"), Catch::Contains("checkpoint.dir is not writable"));
    fs::permissions(tmp / "read-only", fs::perms::owner_all);
  }
}

TEST_CASE("a checkpoint directory whose `latest` is not a file is refused before training", "[ckpt][lock]") {
  TempDir tmp;
  fs::create_directories(tmp / "ckpt/latest");
  CHECK_THAT(refusal_of(tmp / "ckpt"), Catch::Contains(tmp / "ckpt/latest") && Catch::Contains("is a directory") &&
                                           Catch::Contains("the first save would fail"));
  fs::remove(tmp / "ckpt/latest");
  REQUIRE(::mkfifo((tmp / "ckpt/latest").c_str(), 0644) == 0);
  CHECK_THAT(refusal_of(tmp / "ckpt"), Catch::Contains("is not a regular file"));
  fs::remove(tmp / "ckpt/latest");
  // A file, a link to one and a dangling link (which a save simply replaces) are fine.
  write_bytes(tmp / "step_name", "step_2\n");
  fs::create_symlink(tmp / "step_name", tmp / "ckpt/latest");
  CHECK(refusal_of(tmp / "ckpt").empty());
  fs::remove(tmp / "step_name");
  CHECK(refusal_of(tmp / "ckpt").empty());
}

TEST_CASE("a step name that is not a directory is refused before training", "[ckpt][lock]") {
  // A save of step 10 renames its temporary directory to step_10: a file there failed that save,
  // after the training up to it.
  TempDir tmp;
  fs::create_directories(tmp / "ckpt/step_5");
  write_bytes(tmp / "ckpt/step_10", "");
  write_bytes(tmp / "ckpt/step_x", "");  // not a step name: left alone
  CHECK_THAT(refusal_of(tmp / "ckpt"),
             Catch::Contains(tmp / "ckpt/step_10") && Catch::Contains("is not a directory, but a save of its step"));
  fs::remove(tmp / "ckpt/step_10");
  CHECK(refusal_of(tmp / "ckpt").empty());
}

TEST_CASE("a lock file that is a symbolic link is refused, and what it names is kept", "[ckpt][lock]") {
  TempDir tmp;
  fs::create_directories(tmp / "ckpt");
  write_bytes(tmp / "precious.txt", "precious\n");
  fs::create_symlink(tmp / "precious.txt", tmp / "ckpt/job.lock");
  CHECK_THAT(refusal_of(tmp / "ckpt"), Catch::Contains(tmp / "ckpt/job.lock") && Catch::Contains("symbolic link"));
  CHECK(read_bytes(tmp / "precious.txt") == "precious\n");
}
