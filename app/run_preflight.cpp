#include "app/run_preflight.h"

#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/hf.h"
#include "engine/data/data_error.h"
#include "engine/data/datasets.h"
#include "engine/train/run_records.h"

namespace ptrain::app {
namespace {

// The step the run would resume from (0: from the beginning), as the trainer will find it; 0 where
// checkpoint.dir cannot be read now (the trainer says why, holding its lock).
std::int64_t resume_step(const config::JobSpec& spec) {
  if (spec.checkpoint.dir.empty() || spec.checkpoint.resume != config::Resume::Auto) return 0;
  try {
    const std::optional<std::string> latest = ckpt::latest_checkpoint(spec.checkpoint.dir);
    if (!latest) return 0;
    return ckpt::parse_step_dir_name(std::filesystem::path(*latest).filename().string()).value_or(0);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::vector<config::Diagnostic> run_input_errors(const config::LoadResult& job, bool records) {
  const config::JobSpec& spec = job.spec;
  std::vector<config::Diagnostic> out;
  // The data, opened as the trainer opens it (the files found, their headers checked), so that a
  // missing or malformed file is refused at its own key, once, before a rank starts.
  const std::string data_fix =
      "check the path (relative paths start from the working directory, not from the job file) and that "
      "the data was prepared";
  try {
    data::open_train_source(spec);
  } catch (const data::DataError& e) {
    out.push_back(job.at("data.train", e.what(), data_fix));
  }
  try {
    data::open_valid_source(spec);
  } catch (const data::DataError& e) {
    out.push_back(job.at("data.valid", e.what(), data_fix));
  }
  if (!spec.checkpoint.load_hf.empty()) {
    try {
      ckpt::check_hf(spec.checkpoint.load_hf, spec.model);
    } catch (const ckpt::CheckpointError& e) {
      out.push_back(job.at("checkpoint.load_hf", e.what(),
                           "name an export of this job's model (`ptrain convert JOB --from CKPT --to-hf DIR` writes one)"));
    }
  }
  if (!records) return out;
  if (const std::optional<train::RecordsRefusal> refusal = train::refuse_records(spec, resume_step(spec)))
    out.push_back(job.at(refusal->key, refusal->message, refusal->fix));
  return out;
}

}  // namespace ptrain::app
