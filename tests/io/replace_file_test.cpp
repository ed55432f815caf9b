// io::replace_file: the target holds the new text whole or the old one; a failed write (here the
// file size limit: EFBIG, as a full disk gives ENOSPC) leaves the old file and no temporary file;
// through a symlink the file it names is replaced; permissions stay; a FIFO is never replaced.
#include "engine/io/replace_file.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/temp_dir.h"

using ptrain::io::replace_file;
using ptrain::io::WriteFailure;
using ptrain::test::TempDir;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// Writes past `limit` bytes fail with EFBIG (SIGXFSZ ignored) while it lives.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    const rlimit lower{limit, saved_.rlim_max};
    ::setrlimit(RLIMIT_FSIZE, &lower);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_)(int) = nullptr;
};

}  // namespace

TEST_CASE("replace_file writes a new file and replaces an old one whole") {
  const TempDir dir("ptrain-replace-file");
  const std::string path = dir / "out.json";
  REQUIRE_FALSE(replace_file(path, "first"));
  CHECK(read(path) == "first");
  REQUIRE_FALSE(replace_file(path, ""));
  CHECK(read(path).empty());
  CHECK(entries(dir.path()) == 1);
}

TEST_CASE("a failed write leaves the old file as it was and no temporary file") {
  const TempDir dir("ptrain-replace-file");
  const std::string path = dir / "trace.json";
  write(path, "{\"old\": true}");
  std::optional<WriteFailure> failure;
  {
    const FileSizeLimit limit(4096);
    failure = replace_file(path, std::string(100000, 'x'));
  }
  REQUIRE(failure);
  CHECK(failure->describe() == "write failed: File too large");
  CHECK(read(path) == "{\"old\": true}");
  CHECK(entries(dir.path()) == 1);
}

TEST_CASE("through a symlink the file it names is replaced, and permissions stay") {
  const TempDir dir("ptrain-replace-file");
  const std::string real = dir / "real.svg", link = dir / "link.svg";
  write(real, "old");
  REQUIRE(::chmod(real.c_str(), 0600) == 0);
  std::filesystem::create_symlink(real, link);
  REQUIRE_FALSE(replace_file(link, "new"));
  CHECK(std::filesystem::is_symlink(link));
  CHECK(read(real) == "new");
  struct stat info {};
  REQUIRE(::stat(real.c_str(), &info) == 0);
  CHECK((info.st_mode & 07777) == 0600);
}

TEST_CASE("what is not a regular file is left alone") {
  const TempDir dir("ptrain-replace-file");
  const std::string fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const std::optional<WriteFailure> failure = replace_file(fifo, "text");
  REQUIRE(failure);
  CHECK(failure->describe() == "it is a named pipe (FIFO), not a regular file");
  struct stat info {};
  REQUIRE(::stat(fifo.c_str(), &info) == 0);
  CHECK(S_ISFIFO(info.st_mode));
  CHECK(entries(dir.path()) == 1);
}

TEST_CASE("a folder that is not there is the failure to create the temporary file") {
  const TempDir dir("ptrain-replace-file");
  const std::optional<WriteFailure> failure = replace_file(dir / "missing/out.html", "page");
  REQUIRE(failure);
  CHECK_THAT(failure->describe(), Catch::StartsWith("cannot create " + dir / "missing/out.html.tmp-") &&
                                      Catch::EndsWith(": No such file or directory"));
}
