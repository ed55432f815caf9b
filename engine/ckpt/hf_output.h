// HfOutput: the directory an HF export goes to, written aside and moved into place at the end.
//
// The files are written into a temporary directory (`.<name>.tmp-<random>` beside a directory that
// does not exist yet, `.export.tmp-<random>` inside one that does) and moved into place once all of
// them are on the disk, so that a reader never meets half an export, a failed export leaves nothing
// behind, and two exports started into one directory cannot mix: what the check at the start
// allowed is checked again, atomically, by the move itself. Without `replace`, the later export is
// refused (bad input) where the directory, or its model.safetensors, appeared in the meantime.
#pragma once

#include <string>
#include <vector>

namespace ptrain::ckpt {

class HfOutput {
 public:
  static constexpr const char* kModelFile = "model.safetensors";
  static constexpr const char* kConfigFile = "config.json";

  // Checks that an export may go to `out_dir` (named `role` in messages) and makes the temporary
  // directory. CheckpointError (bad input) naming the path where `out_dir` is not a directory this
  // process can create and write, holds a directory by the name of one of the export's files, or
  // holds a sharded model (model.safetensors.index.json, whose shards readers would take instead of
  // or beside the export). Whether a model.safetensors there may be replaced is the caller's to say
  // at the start; publish() says it again at the end.
  HfOutput(std::string out_dir, std::string role, bool replace);
  ~HfOutput();  // removes the temporary directory, unless published
  HfOutput(const HfOutput&) = delete;
  HfOutput& operator=(const HfOutput&) = delete;

  const std::string& dir() const { return out_dir_; }
  // Where the export writes its files before publish().
  const std::string& staging() const { return staging_; }

  // Moves the written files into dir(): a directory that did not exist at the start is renamed into
  // place whole; into one that did, model.safetensors and then config.json are renamed one by one.
  // Without `replace`, a dir() (new at the start) or a model.safetensors (in an existing dir()) that
  // appeared meanwhile is a CheckpointError naming it, and nothing is moved. CheckpointIoError if a
  // rename fails.
  void publish();

 private:
  void move_files_into_place();
  void remove_made_parents();
  std::string refusal_fix() const;

  std::string out_dir_, role_;
  bool replace_;
  bool existed_ = false;  // out_dir_ at the start
  std::string staging_;
  std::vector<std::string> made_parents_;  // folders above a new out_dir_ made for staging_, outermost first
  bool published_ = false;
};

}  // namespace ptrain::ckpt
