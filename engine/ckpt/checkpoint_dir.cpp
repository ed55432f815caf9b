// The contents of a checkpoint directory (checkpoint.h declares these): step directory names, the
// newest complete checkpoint and what was passed over to find it, leftovers of crashed saves.
#include <algorithm>
#include <filesystem>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/manifest.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;
namespace {

bool is_leftover_name(const std::string& name) {
  // step_<N>.tmp-* (a crashed save, or the old contents of a re-saved step) and latest.tmp-* (a
  // crashed update of `latest`)
  if (name.rfind("latest.tmp-", 0) == 0) return true;
  const auto dot = name.find('.');
  return dot != std::string::npos && parse_step_dir_name(name.substr(0, dot)) &&
         name.compare(dot, 5, ".tmp-") == 0;
}

}  // namespace

// ------------------------------------------------------------------------------------------ names

std::string step_dir_name(std::int64_t step) {
  return "step_" + std::to_string(step);
}

std::optional<std::int64_t> parse_step_dir_name(const std::string& name) {
  constexpr std::string_view prefix = "step_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  std::int64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

// ------------------------------------------------------------------------------------------ leftovers

void remove_leftovers(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (is_leftover_name(e.path().filename().string())) leftovers.push_back(e.path());
  for (const fs::path& p : leftovers) fs::remove_all(p, ec);
  try {
    fsync_directory(dir);
  } catch (const CheckpointIoError&) {
  }
}

// ------------------------------------------------------------------------------------------ finding

std::vector<std::int64_t> step_directories(const std::string& dir) {
  std::error_code ec;
  std::vector<std::int64_t> steps;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (const auto n = parse_step_dir_name(e.path().filename().string()); n && e.is_directory(ec)) steps.push_back(*n);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::string held_checkpoints(const std::string& dir) {
  std::string held;
  for (const std::int64_t step : step_directories(dir)) held += (held.empty() ? "" : ", ") + step_dir_name(step);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(join_path(dir, kLatestName), ec)))
    held += (held.empty() ? "" : ", ") + std::string(kLatestName);
  return held;
}

void refuse_starting_over(const std::string& dir) {
  const std::string held = held_checkpoints(dir);
  if (held.empty()) return;
  throw CheckpointError(dir, "holds checkpoints (" + held + ") and checkpoint.resume is never: this run would "
                        "replace them with its own and point `latest` at them, so the job that wrote them would "
                        "resume from this run's weights (fix: checkpoint.resume: auto to continue from them, or an "
                        "empty or new checkpoint.dir to start over)");
}

std::optional<std::string> latest_checkpoint(const std::string& dir, std::vector<std::string>* warnings) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  auto complete = [&](std::int64_t step) {
    return fs::is_regular_file(join_path(join_path(dir, step_dir_name(step)), kManifestName), ec);
  };
  const std::vector<std::int64_t> steps = step_directories(dir);
  std::vector<std::string> notes;

  const std::string latest_path = join_path(dir, kLatestName);
  std::optional<std::int64_t> named;  // the step `latest` names
  if (fs::exists(latest_path, ec)) {
    std::string name;
    try {
      const runtime::MappedFile bytes = map_file(latest_path);
      if (bytes.size() < 4096) name.assign(reinterpret_cast<const char*>(bytes.bytes().data()), bytes.bytes().size());
    } catch (const CheckpointError&) {  // unreadable: said below, like any other content
    }
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
    named = parse_step_dir_name(name);
    if (!named) notes.push_back(latest_path + " does not name a step directory: ignored");
  }
  std::optional<std::int64_t> chosen;
  if (named && complete(*named)) {
    chosen = named;
  } else {
    const auto newest = std::find_if(steps.begin(), steps.end(), complete);
    if (newest != steps.end()) chosen = *newest;
  }
  for (std::int64_t n : steps) {
    if (chosen && n <= *chosen) break;
    notes.push_back("skipping " + join_path(dir, step_dir_name(n)) + ": " +
                    (complete(n) ? "it is newer than " + step_dir_name(*named) +
                                       ", which `latest` names: its save did not get to replace `latest`"
                                 : std::string("no manifest.json in it (a damaged checkpoint, or a save that did "
                                               "not finish)")));
  }
  const bool named_skipped = named && chosen && *named > *chosen && std::count(steps.begin(), steps.end(), *named);
  if (named && !complete(*named) && !named_skipped)
    notes.push_back(latest_path + " names " + step_dir_name(*named) + ", which " +
                    (fs::is_directory(join_path(dir, step_dir_name(*named)), ec) ? "has no manifest.json" : "does not exist") +
                    ": ignored");
  if (warnings != nullptr) warnings->insert(warnings->end(), notes.begin(), notes.end());
  if (!chosen) return std::nullopt;
  return join_path(dir, step_dir_name(*chosen));
}

}  // namespace ptrain::ckpt
