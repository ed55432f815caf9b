#include "engine/io/output_probe.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "engine/io/file_kind.h"

namespace ptrain::io {

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  if (a.empty() || b.empty()) return false;
  std::error_code ec, ec_a, ec_b;
  if (fs::exists(a, ec_a) && fs::exists(b, ec_b)) return fs::equivalent(a, b, ec) && !ec;
  // One not made yet: the same path once made absolute and symlinks and dots are resolved
  // (weakly_canonical alone leaves a path relative where its first part does not exist).
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec_a), ec_a);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec_b), ec_b);
  return !ec_a && !ec_b && ca == cb;
}

namespace {

// The parts of `path` made absolute, symlinks and dots resolved as far as it exists; none when it
// cannot be (a path too long).
std::vector<std::filesystem::path> resolved_parts(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::absolute(path, ec), ec);
  std::vector<fs::path> parts;
  if (ec) return parts;
  for (const fs::path& part : resolved)
    if (!part.empty()) parts.push_back(part);  // not the empty part of a trailing separator
  return parts;
}

}  // namespace

bool is_within(const std::string& path, const std::string& dir) {
  namespace fs = std::filesystem;
  if (path.empty() || dir.empty()) return false;
  const std::vector<fs::path> in = resolved_parts(dir);
  const auto under = [&in](const std::vector<fs::path>& parts) {
    return !in.empty() && parts.size() >= in.size() && std::equal(in.begin(), in.end(), parts.begin());
  };
  if (under(resolved_parts(path))) return true;
  // Where its own entry is: its folder resolved, its name as it is.
  const fs::path entry = fs::path(path).lexically_normal();
  if (!entry.has_filename() || entry.filename() == "." || entry.filename() == "..") return false;
  std::vector<fs::path> entry_parts = resolved_parts(entry.has_parent_path() ? entry.parent_path() : ".");
  entry_parts.push_back(entry.filename());
  return entry_parts.size() > 1 && under(entry_parts);
}

std::string other_kind_at(const std::string& path, OutputKind kind) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return "";  // nothing there, or out of reach: opening it says
  if (kind == OutputKind::File ? S_ISREG(info.st_mode) : S_ISDIR(info.st_mode)) return "";
  return file_kind(info.st_mode);
}

std::string cannot_write(const std::string& path, MakeFolder make_folder) {
  namespace fs = std::filesystem;
  std::error_code ignored;  // a folder that cannot be made shows up as the open failing
  const fs::path parent = fs::path(path).parent_path();
  if (make_folder == MakeFolder::Yes && !parent.empty()) fs::create_directories(parent, ignored);
  if (const std::string other = other_kind_at(path, OutputKind::File); !other.empty())
    return "it is " + other + ", not a regular file";
  const bool existed = fs::exists(fs::symlink_status(path, ignored));
  errno = 0;
  std::ofstream probe(path, std::ios::app);
  if (!probe) return errno != 0 ? std::strerror(errno) : "cannot open for writing";
  probe.close();
  if (!existed) fs::remove(path, ignored);
  return "";
}

}  // namespace ptrain::io
