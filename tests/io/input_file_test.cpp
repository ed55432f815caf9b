// InputFile: a named pipe, a device or a directory is refused at once, naming the path (opening a
// FIFO the usual way would wait for a writer forever); a regular file, or a link to one, is read.
#include "engine/io/input_file.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "tests/temp_dir.h"

using ptrain::io::FileError;
using ptrain::io::InputFile;
using ptrain::io::read_input_file;
using ptrain::test::TempDir;

namespace {

FileError error_of(const std::string& path) {
  try {
    InputFile file(path);
  } catch (const FileError& e) {
    return e;
  }
  throw std::logic_error("opening " + path + " did not fail");
}

}  // namespace

TEST_CASE("a regular file, or a link to one, is read whole") {
  TempDir dir("ptrain-io-test");
  const std::string path = dir / "job.yaml";
  std::ofstream(path, std::ios::binary) << std::string("name: x\0y", 9);
  const InputFile file(path);
  CHECK(file.path() == path);
  CHECK(file.size() == 9);
  CHECK(file.read_all() == std::string("name: x\0y", 9));
  std::filesystem::create_symlink(path, dir / "link.yaml");
  CHECK(read_input_file(dir / "link.yaml") == std::string("name: x\0y", 9));
}

TEST_CASE("a named pipe is refused at once, without waiting for a writer") {
  TempDir dir("ptrain-io-test");
  const std::string fifo = dir / "train_000.bin";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const auto start = std::chrono::steady_clock::now();
  const FileError e = error_of(fifo);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(e.path() == fifo);
  CHECK(e.error_number() == 0);
  CHECK(std::string(e.what()) == fifo + ": expected a regular file, found a named pipe (FIFO)");
  std::filesystem::create_symlink(fifo, dir / "link");  // through a link alike
  CHECK_THAT(error_of(dir / "link").detail(), Catch::Contains("named pipe"));
}

TEST_CASE("a relative path not found says the working directory it was looked for from") {
  // A job's relative data path that was not there said only "No such file or directory".
  TempDir dir("ptrain-io-test");
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const std::string cwd = std::filesystem::current_path().string();
  const FileError missing = error_of("data/val.bin");
  std::filesystem::current_path(before);
  CHECK(missing.detail() == std::string("cannot open for reading: ") + std::strerror(ENOENT) +
                                " (relative to the working directory " + cwd + ": " + cwd + "/data/val.bin)");
  CHECK(ptrain::io::relative_path_note("/abs/val.bin").empty());
  CHECK(error_of(dir / "missing.bin").detail().find("working directory") == std::string::npos);
}

TEST_CASE("a directory, a device or a missing file is refused, naming the path") {
  TempDir dir("ptrain-io-test");
  CHECK(error_of(dir / "").detail() == "expected a regular file, found a directory");
  CHECK(error_of("/dev/null").detail() == "expected a regular file, found a character device");
  const FileError missing = error_of(dir / "missing.yaml");
  CHECK(missing.path() == dir / "missing.yaml");
  CHECK(missing.error_number() == ENOENT);
  CHECK_THAT(missing.detail(), Catch::StartsWith("cannot open for reading: "));
}
