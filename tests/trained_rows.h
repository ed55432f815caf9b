// Test support: a job trained in-process on `ranks` Gloo ranks (threads) with `ops`, and the
// metrics rows rank 0 logged, one per step, read back from a temporary JSONL file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "kernels/ops.h"
#include "tests/gloo_ranks.h"
#include "tests/load_job.h"

namespace ptrain::test {

inline std::vector<nlohmann::json> trained_rows(const std::string& yaml, std::vector<std::string> sets, int ranks,
                                                const kernels::Ops& ops) {
  const std::string metrics =
      (std::filesystem::temp_directory_path() / ("ptrain-trained-rows-" + std::to_string(::getpid()) + ".jsonl"))
          .string();
  std::filesystem::remove(metrics);
  sets.push_back("logging.metrics=" + metrics);
  const config::LoadResult job = load_job(yaml, sets, ranks);
  run_gloo_ranks(ranks, [&](dist::Comm& comm) { train::Trainer(job.spec, ops, comm).run(); });
  std::vector<nlohmann::json> rows;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  std::filesystem::remove(metrics);
  return rows;
}

}  // namespace ptrain::test
