// Replacing a file whole, so that neither a failure nor a reader ever meets half of it: the text is
// written to a temporary file beside the target (one filesystem, so the rename is atomic), synced to
// the disk, checked, and renamed over the target; then the folder is synced. On a failure the
// temporary file is removed and the target is as it was. Every file ptrain writes in one piece
// (a command's --out, a run's trace, a checkpoint's `latest`) goes through here.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ptrain::io {

// Why a replace_file failed: the step ("write failed", "cannot rename X to it", "it is a directory,
// not a regular file") and errno (0 where the step says it all).
struct WriteFailure {
  std::string action;
  int error = 0;
  // "write failed: No space left on device".
  std::string describe() const;
};

// Replaces `path` with `contents` as above; nullopt once done. Through a symlink, the file it points
// at is replaced (the link stays); a file that was there keeps its permissions. What is there and
// is not a regular file (a FIFO, a device, a directory) is left alone: a failure.
std::optional<WriteFailure> replace_file(const std::string& path, std::string_view contents);

// fsync on a directory, which makes the creation, removal or renaming of its entries durable.
std::optional<WriteFailure> sync_directory(const std::string& dir);

// 16 random hex digits, for temporary names that do not collide between processes.
std::string random_hex_suffix();

}  // namespace ptrain::io
