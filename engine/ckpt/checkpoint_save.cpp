// Saving a checkpoint (checkpoint.h): every rank writes its file into the step's temporary
// directory, rank 0 commits the manifest and installs the directory, then prunes older steps.
#include "engine/ckpt/checkpoint.h"

#include <fcntl.h>  // AT_FDCWD
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc)

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/checkpoint_pieces.h"
#include "engine/ckpt/crc32c.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/manifest.h"
#include "engine/ckpt/safetensors.h"
#include "engine/ckpt/strict_json.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;
namespace {

// Moves the finished temporary directory to its final name; true if that name was free. An
// existing step directory (the same step saved again) is swapped out atomically and then removed.
bool install_step_dir(const std::string& tmp_dir, const std::string& final_dir) {
  if (::rename(tmp_dir.c_str(), final_dir.c_str()) == 0) return true;
  if (errno != ENOTEMPTY && errno != EEXIST)
    throw CheckpointIoError(final_dir, "cannot rename " + tmp_dir + " to it", errno);
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
    throw CheckpointIoError(final_dir, "cannot replace it with " + tmp_dir, errno);
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);  // now the old contents
  return false;
}

}  // namespace

// ------------------------------------------------------------------------------------------ rank info

nlohmann::json to_json(const RankFileInfo& info) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const RankFileInfo::Piece& p : info.pieces)
    pieces.push_back(
        {{"tensor", p.tensor}, {"shape", p.global_shape}, {"key", p.key}, {"runs", runs_to_json(p.runs)}});
  return {{"rank", info.rank},
          {"file", info.file},
          {"bytes", info.bytes},
          {"crc32c", crc32c_hex(info.crc32c)},
          {"pieces", std::move(pieces)}};
}

RankFileInfo rank_file_info_from_json(const nlohmann::json& value) {
  const std::string origin = "<rank file info>";
  JsonReader r(value, origin, "rank");
  RankFileInfo info;
  info.rank = static_cast<int>(std::min<std::int64_t>(r.non_negative("rank"), 1 << 30));
  info.file = r.string("file");
  if (!plain_file_name(info.file)) r.fail("bad file name \"" + info.file + "\"");
  info.bytes = r.non_negative("bytes");
  if (!parse_crc32c_hex(r.string("crc32c"), info.crc32c)) r.fail("crc32c is not 8 hex digits");
  for (const nlohmann::json& p : r.array("pieces")) {
    JsonReader pr(p, origin, "rank.pieces[]");
    RankFileInfo::Piece piece;
    piece.tensor = pr.string("tensor");
    piece.key = pr.string("key");
    piece.global_shape = read_shape(pr.at("shape"), origin, pr.where("shape"));
    piece.runs = runs_from_json(pr.at("runs"), checked_numel(piece.global_shape, origin, piece.tensor),
                                origin, pr.where("runs"));
    info.pieces.push_back(std::move(piece));
  }
  return info;
}

// ------------------------------------------------------------------------------------------ saving

std::string begin_checkpoint(const std::string& dir, std::int64_t step) {
  if (step < 0) throw std::invalid_argument("begin_checkpoint: negative step");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointIoError(dir, "cannot create checkpoint directory", ec.value());
  const std::string tmp = join_path(dir, step_dir_name(step) + ".tmp-" + random_hex_suffix());
  make_directory(tmp);
  return tmp;
}

RankFileInfo write_rank_file(const std::string& tmp_dir, int rank, std::int64_t step,
                             const std::vector<TensorShard>& shards) {
  RankFileInfo info;
  info.rank = rank;
  info.file = "rank_" + std::to_string(rank) + ".safetensors";
  SafetensorsWriter writer;
  writer.set_metadata("format", "ptrain");
  writer.set_metadata("rank", std::to_string(rank));
  writer.set_metadata("step", std::to_string(step));
  for (const TensorShard& s : shards) {
    const std::int64_t numel = runs_numel(s.runs);
    std::vector<std::int64_t> stored =
        s.stored_shape.empty() ? std::vector<std::int64_t>{numel} : s.stored_shape;
    std::int64_t stored_numel = 1;
    for (std::int64_t d : stored) stored_numel *= d;
    if (stored_numel != numel)
      throw std::invalid_argument("write_rank_file: shard " + s.name + " stores " +
                                  std::to_string(stored_numel) + " elements but its runs list " +
                                  std::to_string(numel));
    writer.add_f32(s.name, std::move(stored), s.data);
    info.pieces.push_back({s.name, s.global_shape, s.name, s.runs});
  }
  const SafetensorsWriter::Written w = writer.write(join_path(tmp_dir, info.file), /*sync=*/true);
  info.bytes = w.bytes;
  info.crc32c = w.crc32c;
  return info;
}

void prune_checkpoints(const std::string& dir, std::int64_t step, int keep) {
  std::error_code ec;
  std::vector<std::pair<std::int64_t, fs::path>> older;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (const auto n = parse_step_dir_name(name); n && *n < step && e.is_directory(ec)) older.emplace_back(*n, e.path());
  }
  if (keep > 0) {
    std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (std::size_t i = static_cast<std::size_t>(keep - 1); i < older.size(); ++i)
      fs::remove_all(older[i].second, ec);
  }
  remove_leftovers(dir);
}

std::string commit_checkpoint(const std::string& dir, const std::string& tmp_dir, std::int64_t step,
                              const nlohmann::json& job_meta, const nlohmann::json& state,
                              const std::vector<RankFileInfo>& ranks) {
  nlohmann::json files = nlohmann::json::array();
  struct Merged {
    std::vector<std::int64_t> shape;
    nlohmann::json pieces = nlohmann::json::array();
    std::vector<const IndexRuns*> runs;
  };
  std::map<std::string, Merged> tensors;
  std::set<std::string> file_names;
  for (const RankFileInfo& rank : ranks) {
    if (!file_names.insert(rank.file).second)
      throw std::invalid_argument("commit_checkpoint: two ranks wrote " + rank.file);
    files.push_back(
        {{"file", rank.file}, {"rank", rank.rank}, {"bytes", rank.bytes}, {"crc32c", crc32c_hex(rank.crc32c)}});
    for (const RankFileInfo::Piece& p : rank.pieces) {
      auto [it, fresh] = tensors.try_emplace(p.tensor);
      if (fresh) it->second.shape = p.global_shape;
      if (it->second.shape != p.global_shape)
        throw std::invalid_argument("commit_checkpoint: ranks disagree on the shape of " + p.tensor);
      it->second.pieces.push_back({{"file", rank.file}, {"key", p.key}, {"runs", runs_to_json(p.runs)}});
      it->second.runs.push_back(&p.runs);
    }
  }
  nlohmann::json tensor_json = nlohmann::json::object();
  for (auto& [name, m] : tensors) {
    std::int64_t numel = 1;
    for (std::int64_t d : m.shape) numel *= d;
    // A layout bug would otherwise surface only when someone loads the checkpoint.
    if (const auto gap = first_gap(build_segments(m.runs), numel))
      throw std::logic_error("commit_checkpoint: elements [" + std::to_string(gap->first) + ", " +
                             std::to_string(gap->second) + ") of " + name + " are held by no rank");
    tensor_json[name] = {{"dtype", "F32"}, {"shape", m.shape}, {"pieces", std::move(m.pieces)}};
  }
  const nlohmann::json manifest = {{"format", kCheckpointFormatName},
                                   {"version", kCheckpointFormatVersion},
                                   {"step", step},
                                   {"job", job_meta.is_null() ? nlohmann::json::object() : job_meta},
                                   {"state", state.is_null() ? nlohmann::json::object() : state},
                                   {"files", std::move(files)},
                                   {"tensors", std::move(tensor_json)}};
  const std::string text = manifest_text(manifest);
  {
    FileWriter out(join_path(tmp_dir, kManifestName));
    out.write(text.data(), text.size());
    out.finish();
  }
  fsync_directory(tmp_dir);

  const std::string final_dir = join_path(dir, step_dir_name(step));
  const bool fresh = install_step_dir(tmp_dir, final_dir);
  try {
    fsync_directory(dir);
    write_file_atomically(join_path(dir, kLatestName), step_dir_name(step) + "\n");
  } catch (const CheckpointIoError&) {
    // `latest` still names the previous checkpoint: take the new step back out, so that a failed
    // save leaves the directory as it found it (and frees the space).
    std::error_code ec;
    if (fresh) fs::remove_all(final_dir, ec);
    throw;
  }
  return final_dir;
}

std::string save_checkpoint(const std::string& dir, std::int64_t step, const nlohmann::json& job_meta,
                            const nlohmann::json& state, const std::vector<TensorShard>& shards, int keep) {
  const std::string tmp = begin_checkpoint(dir, step);
  try {
    const RankFileInfo info = write_rank_file(tmp, 0, step, shards);
    const std::string path = commit_checkpoint(dir, tmp, step, job_meta, state, {info});
    prune_checkpoints(dir, step, keep);
    return path;
  } catch (...) {
    abandon_checkpoint(tmp);
    throw;
  }
}

void abandon_checkpoint(const std::string& tmp_dir) {
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
}

}  // namespace ptrain::ckpt
