#include "app/report_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "app/report_sampler.h"
#include "engine/io/input_file.h"
#include "engine/train/metrics.h"
#include "engine/train/typical_step.h"

namespace ptrain::app {
namespace {

constexpr const char* kMedianKeys[] = {"tokens_per_s", "mfu", "step_s"};

// What is wrong with a metrics row, as `ptrain run` writes them (train/metrics.cpp); empty if
// nothing. A number may be null where the run wrote a NaN; fields it does not know are left alone.
std::string row_problem(const nlohmann::json& row) {
  if (row.is_discarded() || !row.is_object()) return "not a JSON object";
  const auto step = row.find("step");
  if (step == row.end() || !step->is_number_integer() || step->get<std::int64_t>() < 0 ||
      step->get<std::int64_t>() > (std::int64_t{1} << 53))
    return "\"step\" must be a whole number of steps";
  for (const train::StepScalar& f : train::step_scalars()) {
    const auto v = row.find(f.key);
    if (v != row.end() && !v->is_number() && !v->is_null())
      return std::string("\"") + f.key + "\" must be a number";
  }
  if (const auto idle = row.find("pipeline_idle"); idle != row.end() && idle->is_number() &&
                                                    !(idle->get<double>() >= 0 && idle->get<double>() <= 1))
    return "\"pipeline_idle\" must be a fraction in [0, 1]";
  if (std::string problem = slowest_rank_problem(row); !problem.empty()) return problem;
  if (const auto segment = row.find("segment"); segment != row.end()) {
    if (!segment->is_object()) return "\"segment\" must be an object (the record of a run's start)";
    if (const auto n = segment->find("number"); n != segment->end() && !n->is_number_integer())
      return "\"segment.number\" must be a whole number";
    if (const auto job = segment->find("job"); job != segment->end() && !job->is_string())
      return "\"segment.job\" must be the job's YAML text";
  }
  for (const train::StepPerAxis& f : train::step_per_axis()) {
    const std::string key = f.key;
    const auto v = row.find(key);
    if (v == row.end()) continue;
    if (!v->is_object()) return "\"" + key + "\" must be an object of numbers by axis";
    for (const auto& [axis, value] : v->items())
      if (!value.is_number()) return "\"" + key + "." + axis + "\" must be a number";
  }
  return {};
}

// Calls `line` with each line of `file` and its number (from 1), reading a block at a time; stops
// where it returns false. Throws io::FileError where a read fails.
void for_each_line(const io::InputFile& file, const std::function<bool(std::string_view, int)>& line) {
  std::string pending;  // a line not yet ended
  std::vector<char> block(std::size_t{1} << 20);
  int number = 0;
  for (;;) {
    const ssize_t n = ::read(file.fd(), block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io::FileError(file.path(), std::string("read failed: ") + std::strerror(errno), errno);
    if (n == 0) break;
    std::string_view rest(block.data(), static_cast<std::size_t>(n));
    for (std::size_t end; (end = rest.find('\n')) != std::string_view::npos; rest.remove_prefix(end + 1)) {
      const bool whole = pending.empty();
      if (!whole) pending.append(rest.substr(0, end));
      if (!line(whole ? rest.substr(0, end) : std::string_view(pending), ++number)) return;
      pending.clear();
    }
    pending.append(rest);
  }
  if (!pending.empty()) line(pending, ++number);
}

// A column's values, those of the start-up rows apart: its median is the run's.
struct MedianColumn {
  std::vector<double> values;
  std::size_t early = 0;  // values from the rows that are start-up rows once there are more than them
};

double median_after_start_up(MedianColumn& column, std::size_t rows) {
  std::vector<double>& v = column.values;
  const auto from = v.begin() + static_cast<std::ptrdiff_t>(train::start_up_steps(rows) > 0 ? column.early : 0);
  if (from == v.end()) return 0;
  const auto middle = from + (v.end() - from) / 2;
  std::nth_element(from, middle, v.end());
  return *middle;
}

}  // namespace

std::vector<std::pair<double, double>> RunMetrics::curve(const std::string& key, double scale) const {
  const auto found = curves.find(key);
  if (found == curves.end()) return {};
  std::vector<std::pair<double, double>> out = found->second;
  for (auto& point : out) point.second *= scale;
  return out;
}

std::optional<RunMetrics> read_run_metrics(const std::string& path) {
  std::map<std::string, SeriesSampler> samplers;
  std::map<std::string, MedianColumn> columns;
  std::vector<std::map<std::string, MedianColumn>> segment_columns;  // per segment
  std::vector<std::size_t> segment_rows;
  RunMetrics metrics;
  std::size_t rows = 0;
  const std::size_t start_up = train::start_up_steps(std::numeric_limits<std::size_t>::max());  // a long run's
  std::string problem;
  int problem_line = 0;
  try {
    const io::InputFile file(path);
    for_each_line(file, [&](std::string_view line, int number) {
      if (line.empty()) return true;
      const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
      problem = row_problem(row);
      if (!problem.empty()) {
        problem_line = number;
        return false;
      }
      metrics.last_step = row["step"].get<std::int64_t>();
      const double step = static_cast<double>(metrics.last_step);
      const auto record = row.find("segment");
      if (metrics.segments.empty() || (record != row.end() && rows > 0)) {  // a boundary
        RunSegment segment;
        segment.number = metrics.segments.empty() ? 1 : metrics.segments.back().number + 1;
        segment.first_step = metrics.last_step;
        metrics.segments.push_back(std::move(segment));
        segment_columns.emplace_back();
        segment_rows.push_back(0);
      }
      RunSegment& segment = metrics.segments.back();
      if (record != row.end()) {
        segment.record = *record;
        if (const auto n = record->find("number"); n != record->end()) segment.number = n->get<std::int64_t>();
      }
      segment.last_step = metrics.last_step;
      segment.stragglers.add(metrics.last_step, row);
      for (const train::StepScalar& f : train::step_scalars()) {
        const auto v = row.find(f.key);
        if (v == row.end() || !v->is_number()) continue;
        samplers[f.key].add({step, v->get<double>()});
      }
      for (const char* key : kMedianKeys) {
        const auto v = row.find(key);
        if (v == row.end() || !v->is_number()) continue;
        for (auto [column, row_number] : {std::pair{&columns[key], rows},
                                          std::pair{&segment_columns.back()[key], segment_rows.back()}}) {
          column->values.push_back(v->get<double>());
          if (row_number < start_up) ++column->early;
        }
      }
      ++segment_rows.back();
      const auto loss = row.find("loss");
      metrics.last_loss = loss != row.end() && loss->is_number() ? std::optional<double>(loss->get<double>()) : std::nullopt;
      ++rows;
      return true;
    });
  } catch (const io::FileError& e) {
    std::fprintf(stderr, "error: cannot read the metrics file '%s': %s (give a run directory holding metrics.jsonl, "
                         "or the file logging.metrics names)\n", path.c_str(), e.detail().c_str());
    return std::nullopt;
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "error: %s:%d: not a metrics row of `ptrain run` (%s)\n", path.c_str(), problem_line,
                 problem.c_str());
    return std::nullopt;
  }
  if (rows == 0) {
    std::fprintf(stderr, "error: %s holds no steps\n", path.c_str());
    return std::nullopt;
  }
  for (const auto& [key, sampler] : samplers) metrics.curves[key] = sampler.points();
  for (const char* key : kMedianKeys) metrics.medians[key] = median_after_start_up(columns[key], rows);
  for (std::size_t i = 0; i < metrics.segments.size(); ++i)
    for (const char* key : kMedianKeys)
      metrics.segments[i].medians[key] = median_after_start_up(segment_columns[i][key], segment_rows[i]);
  return metrics;
}

}  // namespace ptrain::app
