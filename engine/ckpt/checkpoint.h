// The distributed checkpoint format (docs/formats.md, "Checkpoints"):
//
//   <dir>/latest                      "step_<N>\n", replaced atomically after each save
//   <dir>/job.lock                    held by the job using <dir> (dir_lock.h)
//   <dir>/step_<N>/manifest.json      its own CRC32C (manifest.h), format version, step, job
//                                     essentials, trainer state, the rank files with their sizes
//                                     and CRC32C, and for every global tensor its shape, dtype and
//                                     which stored tensors hold which global elements (runs of flat
//                                     indices)
//   <dir>/step_<N>/rank_<R>.safetensors   what rank R held, in its local layout
//
// Because the manifest maps stored elements to global flat indices, any layout loads any layout:
// a loader asks for the global indices it needs and they are gathered from whichever files hold
// them (replicas are read once). Tensor names: "model/<hf name>", "optim/exp_avg/<hf name>",
// "optim/exp_avg_sq/<hf name>" (see param_checkpoint.h).
//
// Saving is atomic: everything is written into <dir>/step_<N>.tmp-<random>/, each file and the
// directory fsync'd, the directory renamed to step_<N>, <dir> fsync'd, then `latest` replaced, then
// checkpoints older than the newest `keep` removed. A crash leaves either the previous state or the
// new one; leftover temporary directories are ignored by loading and removed by the next save and
// by the next job's claim of the directory (dir_lock.h). A save that fails (disk full) leaves the
// previous state: the failed write removes its file, the saver abandons the temporary directory,
// and a step directory whose `latest` could not be written is taken back out.
//
// Distributed use: rank 0 calls begin_checkpoint and shares the temporary path; every rank calls
// write_rank_file and sends its RankFileInfo (to_json) to rank 0; after a barrier rank 0 calls
// commit_checkpoint, or abandon_checkpoint if anything failed on any rank. save_checkpoint does
// all of it for a single process.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/ckpt/index_runs.h"

namespace ptrain::ckpt {

inline constexpr int kCheckpointFormatVersion = 2;  // 2: the manifest's checksum line; 1 is still read
inline constexpr const char* kCheckpointFormatName = "ptrain-checkpoint";
inline constexpr const char* kLatestName = "latest";  // <dir>/latest

// One rank's part of one global tensor (fp32).
struct TensorShard {
  std::string name;                        // global tensor name, e.g. "model/wte.weight"
  std::vector<std::int64_t> global_shape;  // of the whole tensor
  std::vector<std::int64_t> stored_shape;  // shape in the rank file; empty = 1-D [numel]
  IndexRuns runs;                          // global flat index of every stored element, in order
  const float* data = nullptr;             // runs_numel(runs) elements
};

// What one rank wrote: enough for rank 0 to write the manifest.
struct RankFileInfo {
  struct Piece {
    std::string tensor;  // global tensor name
    std::vector<std::int64_t> global_shape;
    std::string key;  // tensor name inside the file
    IndexRuns runs;
  };
  int rank = 0;
  std::string file;  // "rank_<R>.safetensors", relative to the step directory
  std::int64_t bytes = 0;
  std::uint32_t crc32c = 0;
  std::vector<Piece> pieces;
};
nlohmann::json to_json(const RankFileInfo& info);
RankFileInfo rank_file_info_from_json(const nlohmann::json& value);  // CheckpointError if malformed

std::string step_dir_name(std::int64_t step);  // "step_<N>"
// The step of a directory name "step_<N>" (digits only), or nullopt for any other name.
std::optional<std::int64_t> parse_step_dir_name(const std::string& name);

// Creates <dir> (and parents) if needed and a fresh <dir>/step_<N>.tmp-<random>; returns its path.
std::string begin_checkpoint(const std::string& dir, std::int64_t step);
// Writes <tmp_dir>/rank_<R>.safetensors (fsync'd) holding every shard under its name.
RankFileInfo write_rank_file(const std::string& tmp_dir, int rank, std::int64_t step,
                             const std::vector<TensorShard>& shards);
// Writes the manifest, checks that the files together cover every element of every tensor and makes
// the step directory durable and current. Returns the path of the step directory.
std::string commit_checkpoint(const std::string& dir, const std::string& tmp_dir, std::int64_t step,
                              const nlohmann::json& job_meta, const nlohmann::json& state,
                              const std::vector<RankFileInfo>& ranks);
// After step `step`'s commit: removes the steps older than it beyond the newest `keep` (counting
// `step`; 0 = keep all) and the leftovers of crashed saves, best effort (the step is committed
// whatever happens here). The same condition as remove_leftovers: no save may be under way in `dir`.
void prune_checkpoints(const std::string& dir, std::int64_t step, int keep);
// Removes a temporary directory of begin_checkpoint whose save failed, with whatever is in it (a
// no-op once commit_checkpoint has renamed it). Only the process that began the save may call it.
void abandon_checkpoint(const std::string& tmp_dir);
// Removes what crashed saves left in `dir` (step_<N>.tmp-* and latest.tmp-*), best effort. Only
// safe where no other process is saving into `dir`: after a commit, or holding its lock
// (dir_lock.h).
void remove_leftovers(const std::string& dir);
// Single process: begin + write_rank_file(rank 0) + commit; abandons the save if any of them fails.
std::string save_checkpoint(const std::string& dir, std::int64_t step, const nlohmann::json& job_meta,
                            const nlohmann::json& state, const std::vector<TensorShard>& shards, int keep);

// The steps of the step_<N> directories in `dir` (complete or not), newest first; none without `dir`.
std::vector<std::int64_t> step_directories(const std::string& dir);
// What of a checkpoint history `dir` holds, for a message: its step_<N> directories (newest first)
// and `latest` (of any kind), by name ("step_4, step_2, latest"); empty for an empty, new or missing
// directory.
std::string held_checkpoints(const std::string& dir);
// A run that starts over (checkpoint.resume: never) saves into `dir` as any run does: its step
// directories replace those of the same steps, pruning removes the others, and `latest` names its
// own, so the job that wrote them would resume from this one's weights. CheckpointError (bad input)
// where `dir` holds checkpoints (held_checkpoints), as convert --to refuses one. Call it holding
// `dir`'s lock (dir_lock.h), so no other job fills it meanwhile.
void refuse_starting_over(const std::string& dir);

// The newest complete checkpoint in `dir`: the step directory named by `latest` if it has a
// manifest, else the highest step_<N> with a manifest; nullopt if there is none (or no `dir`).
// Whatever it passes over is said in `warnings` (when given), one line each naming the directory or
// file and why: a step_<N> newer than the one chosen (no manifest.json: a damaged or unfinished
// save; or complete but newer than `latest`), or a `latest` that names nothing usable. Whether a
// manifest is valid is not looked at here: a damaged one is an error when it is opened, not a
// reason to fall back silently to older weights.
std::optional<std::string> latest_checkpoint(const std::string& dir, std::vector<std::string>* warnings = nullptr);

// A checkpoint opened for reading. The manifest is verified (its checksum) and validated on open,
// every member read by type, a CheckpointError naming the file and the key otherwise; rank files
// are opened when first needed, their size and CRC32C checked against the manifest before any
// byte is used.
class LoadedCheckpoint {
 public:
  explicit LoadedCheckpoint(const std::string& step_dir);
  ~LoadedCheckpoint();
  LoadedCheckpoint(LoadedCheckpoint&&) noexcept;
  LoadedCheckpoint& operator=(LoadedCheckpoint&&) noexcept;

  const std::string& path() const { return dir_; }
  std::int64_t step() const { return step_; }
  const nlohmann::json& job_meta() const { return job_; }
  const nlohmann::json& state() const { return state_; }
  const nlohmann::json& manifest() const { return manifest_; }
  // state.consumed_samples: the samples the run had taken when it saved, where its data resumes
  // (not step * global_batch once global_batch has changed). CheckpointError naming the manifest
  // and the key if it is missing, not an integer, or more or fewer than the steps could have taken
  // (each from 1 to 2^31 - 1, train.global_batch's range).
  std::int64_t consumed_samples() const;
  // Caveats to print: a format version 1 manifest has no checksum to vouch for it.
  const std::vector<std::string>& warnings() const { return warnings_; }

  std::vector<std::string> tensor_names() const;
  bool has_tensor(const std::string& name) const;
  // Global shape of a tensor; CheckpointError if there is no such tensor.
  const std::vector<std::int64_t>& tensor_shape(const std::string& name) const;

  // Gathers the global elements listed by `global_runs` (in that order) into `out`. CheckpointError
  // if the tensor is missing, an element is in no file, or a file is corrupt.
  void read_tensor(const std::string& name, const IndexRuns& global_runs, float* out);
  // The whole tensor, row-major.
  std::vector<float> read_tensor(const std::string& name);

  // Opens and checksums every rank file and checks every stored tensor against the manifest.
  void verify();

 private:
  struct Impl;  // tensors, their pieces and the lazily opened rank files
  std::string dir_;
  std::int64_t step_ = 0;
  nlohmann::json manifest_, job_, state_;
  std::vector<std::string> warnings_;
  std::unique_ptr<Impl> impl_;
};

// Opens `path` if it is a step directory (has manifest.json), else the latest checkpoint under it
// (latest_checkpoint, with its warnings).
LoadedCheckpoint open_checkpoint(const std::string& path, std::vector<std::string>* warnings = nullptr);

}  // namespace ptrain::ckpt
