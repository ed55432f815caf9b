#include "engine/ckpt/hf_output.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_NOREPLACE (glibc)
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/file_io.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;
namespace {

constexpr mode_t kNewDirectoryMode = 0777;  // less the umask, as for any new directory

enum class Move { Done, Taken, Unsupported };

// rename(2) that never replaces `to`: Taken where something is there, Unsupported where the
// filesystem cannot refuse atomically (no RENAME_NOREPLACE: NFS, some FUSE filesystems).
Move rename_noreplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return Move::Done;
  if (errno == EEXIST || errno == ENOTEMPTY) return Move::Taken;
  if (errno == EINVAL || errno == ENOSYS) return Move::Unsupported;
  throw CheckpointIoError(to, "cannot rename " + from + " to it", errno);
}

// A file moved to `to` unless something is there (false then); without RENAME_NOREPLACE by link(2),
// which refuses as atomically, and unlink(2).
bool move_file_noreplace(const std::string& from, const std::string& to) {
  const Move moved = rename_noreplace(from, to);
  if (moved != Move::Unsupported) return moved == Move::Done;
  if (::link(from.c_str(), to.c_str()) != 0) {
    if (errno == EEXIST) return false;
    throw CheckpointIoError(to, "cannot link " + from + " to it", errno);
  }
  ::unlink(from.c_str());
  return true;
}

void move_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw CheckpointIoError(to, "cannot rename " + from + " to it", errno);
}

// Makes `dir`; false where something is there already.
bool make_new_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), kNewDirectoryMode) == 0) return true;
  if (errno == EEXIST) return false;
  throw CheckpointIoError(dir, "cannot create directory", errno);
}

// The directory a path names ("hf/" names "hf"), and the one that holds it.
fs::path named(const std::string& dir) {
  const fs::path path(dir);
  return path.has_filename() ? path : path.parent_path();
}
fs::path parent_of(const fs::path& path) {
  return path.has_parent_path() ? path.parent_path() : fs::path(".");
}

}  // namespace

HfOutput::HfOutput(std::string out_dir, std::string role, bool replace)
    : out_dir_(std::move(out_dir)), role_(std::move(role)), replace_(replace) {
  const std::string fix = " (fix: give " + role_ + " an empty or new directory, or one holding only an earlier export)";
  const fs::path path = named(out_dir_);
  std::error_code ec;
  existed_ = fs::exists(fs::symlink_status(path, ec));
  if (existed_) {
    if (!fs::is_directory(path, ec)) throw CheckpointError(out_dir_, role_ + " is not a directory" + fix);
    for (const char* name : {kModelFile, kConfigFile})
      if (fs::is_directory(join_path(out_dir_, name), ec))
        throw CheckpointError(join_path(out_dir_, name), std::string("is a directory, where the export writes a file") + fix);
    const std::string index = join_path(out_dir_, "model.safetensors.index.json");
    if (fs::exists(fs::symlink_status(index, ec)))
      throw CheckpointError(index, "names the shards of a model already in " + out_dir_ + ": beside the exported "
                                   "model.safetensors, readers would take one or the other (ptrain the shards, "
                                   "transformers the new file)" + fix);
    staging_ = join_path(out_dir_, ".export.tmp-" + random_hex_suffix());
  } else {
    // The folders above it that are not there yet: made now, for the temporary directory, and removed
    // again should the export fail.
    std::vector<fs::path> missing;
    for (fs::path above = parent_of(path); !fs::exists(fs::symlink_status(above, ec)); above = parent_of(above))
      missing.push_back(above);
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), kNewDirectoryMode) == 0) {
        made_parents_.push_back(it->string());
      } else if (errno != EEXIST) {
        const std::string cause = std::strerror(errno);
        remove_made_parents();
        throw CheckpointError(out_dir_, "cannot create " + role_ + ": cannot create " + it->string() + ": " + cause + fix);
      }
    }
    staging_ = join_path(parent_of(path), "." + path.filename().string() + ".tmp-" + random_hex_suffix());
  }
  if (::mkdir(staging_.c_str(), kNewDirectoryMode) != 0) {
    const std::string cause = std::strerror(errno);
    remove_made_parents();
    throw CheckpointError(out_dir_, existed_ ? role_ + " is not writable: cannot create a directory in it: " + cause + fix
                                             : "cannot create " + role_ + ": " + cause + fix);
  }
}

HfOutput::~HfOutput() {
  if (published_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
  remove_made_parents();
}

void HfOutput::remove_made_parents() {
  for (auto it = made_parents_.rbegin(); it != made_parents_.rend(); ++it) ::rmdir(it->c_str());  // if empty
  made_parents_.clear();
}

std::string HfOutput::refusal_fix() const {
  return " (fix: give " + role_ + " another directory, or --force to replace what is there)";
}

void HfOutput::publish() {
  if (!existed_) {
    const fs::path path = named(out_dir_);
    const Move whole = rename_noreplace(staging_, path.string());
    if (whole == Move::Done) {
      published_ = true;
      fsync_directory(parent_of(path));
      return;
    }
    // Unsupported: made here (mkdir refuses as atomically), then filled file by file.
    const bool appeared = whole == Move::Taken || !make_new_directory(path.string());
    if (appeared && !replace_)
      throw CheckpointError(out_dir_, "appeared while this export was written (another export into it?): not "
                                      "writing into it" + refusal_fix());
  }
  move_files_into_place();
}

void HfOutput::move_files_into_place() {
  const std::string model = join_path(out_dir_, kModelFile), staged_model = join_path(staging_, kModelFile);
  if (replace_) {
    move_file(staged_model, model);
  } else if (!move_file_noreplace(staged_model, model)) {
    throw CheckpointError(model, "appeared while this export was written (another export into the same directory?): "
                                 "not replacing it" + refusal_fix());
  }
  move_file(join_path(staging_, kConfigFile), join_path(out_dir_, kConfigFile));
  published_ = true;
  std::error_code ec;
  fs::remove(staging_, ec);  // empty now
  fsync_directory(out_dir_);
}

}  // namespace ptrain::ckpt
