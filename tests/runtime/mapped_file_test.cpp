#include "engine/runtime/mapped_file.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "tests/temp_dir.h"

using ptrain::runtime::FileError;
using ptrain::runtime::MappedFile;
using ptrain::test::TempDir;

namespace {

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

std::string text_of(const MappedFile& file) {
  return {reinterpret_cast<const char*>(file.data()), file.bytes().size()};
}

// The FileError that mapping `path` throws.
FileError error_of(const std::string& path) {
  try {
    MappedFile file(path);
  } catch (const FileError& e) {
    return e;
  }
  throw std::logic_error("mapping " + path + " did not fail");
}

}  // namespace

TEST_CASE("a mapped file holds the file's bytes") {
  TempDir dir("ptrain-runtime-test");
  const std::string path = dir / "bytes.bin";
  write_file(path, std::string("hello\0world", 11));
  const MappedFile file(path);
  CHECK(file.path() == path);
  CHECK(file.size() == 11);
  CHECK(file.bytes().size() == 11);
  CHECK(file.bytes().data() == file.data());
  CHECK(text_of(file) == std::string("hello\0world", 11));
}

TEST_CASE("an empty file maps to an empty span") {
  TempDir dir("ptrain-runtime-test");
  const std::string path = dir / "empty.bin";
  write_file(path, "");
  const MappedFile file(path);
  CHECK(file.size() == 0);
  CHECK(file.bytes().empty());
  CHECK(file.data() == nullptr);
}

TEST_CASE("a missing file or a directory fails with the path in the message") {
  TempDir dir("ptrain-runtime-test");
  const std::string missing = dir / "missing.bin";
  const FileError not_found = error_of(missing);
  CHECK(not_found.path() == missing);
  CHECK(not_found.error_number() == ENOENT);
  CHECK_THAT(not_found.detail(),
             Catch::StartsWith("cannot open for reading: ") && Catch::Contains(std::strerror(ENOENT)));
  CHECK_THAT(not_found.what(), Catch::StartsWith(missing + ": cannot open"));

  const std::string subdir = dir / "subdir";
  std::filesystem::create_directory(subdir);
  const FileError not_regular = error_of(subdir);
  CHECK(not_regular.path() == subdir);
  CHECK(not_regular.error_number() == 0);
  CHECK_THAT(not_regular.what(), Catch::StartsWith(subdir + ": ") && Catch::Contains("regular file"));
}

TEST_CASE("a named pipe is refused without waiting for a writer") {
  TempDir dir("ptrain-runtime-test");
  const std::string fifo = dir / "rank_0.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const FileError e = error_of(fifo);  // returns: the open does not block
  CHECK(e.path() == fifo);
  CHECK_THAT(e.detail(), Catch::Contains("named pipe"));
}

TEST_CASE("a mapped file moves, leaving the source empty") {
  TempDir dir("ptrain-runtime-test");
  const std::string a_path = dir / "a.bin";
  const std::string b_path = dir / "b.bin";
  write_file(a_path, "first");
  write_file(b_path, "second file");

  MappedFile a(a_path);
  const std::byte* a_data = a.data();
  MappedFile moved(std::move(a));
  CHECK(moved.path() == a_path);
  CHECK(moved.data() == a_data);
  CHECK(text_of(moved) == "first");
  CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): a moved-from file is empty
  CHECK(a.size() == 0);

  MappedFile b(b_path);
  moved = std::move(b);  // unmaps "first", takes over "second file"
  CHECK(moved.path() == b_path);
  CHECK(text_of(moved) == "second file");
  CHECK(b.data() == nullptr);  // NOLINT(bugprone-use-after-move)
  CHECK(b.bytes().empty());
}
