#include "app/report_stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "app/report_charts.h"
#include "app/report_metrics.h"
#include "app/report_segments.h"

namespace ptrain::app {
namespace {

constexpr double kMaxRank = 2147483648.0;  // 2^31

std::string ratio_text(double ratio) {
  char text[32];
  if (std::isfinite(ratio) && ratio < 1e6)
    std::snprintf(text, sizeof text, "%.2fx", ratio);
  else  // a metrics file written by hand: short all the same
    std::snprintf(text, sizeof text, "%.3gx", ratio);
  return text;
}

// The rank of `tally` that `better` prefers to the others (the first of equals), or ranks.end().
template <typename Better>
std::map<int, StragglerTally::Rank>::const_iterator pick(const StragglerTally& tally, Better better) {
  auto most = tally.ranks.end();
  for (auto it = tally.ranks.begin(); it != tally.ranks.end(); ++it)
    if (most == tally.ranks.end() || better(it->second, most->second)) most = it;
  return most;
}

// "rank 1 (11 of 12 steps, 9.81x the median on average)" of the rank slowest most often; "" for none.
std::string most_often(const StragglerTally& tally) {
  const auto most = pick(tally, [](const StragglerTally::Rank& a, const StragglerTally::Rank& b) { return a.steps > b.steps; });
  if (most == tally.ranks.end()) return "";
  const StragglerTally::Rank& r = most->second;
  return "rank " + std::to_string(most->first) + " (" + std::to_string(r.steps) + " of " + std::to_string(tally.steps) +
         " steps, " + ratio_text(r.ratio_sum / static_cast<double>(r.steps)) + " the median on average)";
}

// "rank 1, 10.70x at step 5" of the worst step; "" for none.
std::string worst(const StragglerTally& tally) {
  const auto most =
      pick(tally, [](const StragglerTally::Rank& a, const StragglerTally::Rank& b) { return a.worst_ratio > b.worst_ratio; });
  if (most == tally.ranks.end()) return "";
  return "rank " + std::to_string(most->first) + ", " + ratio_text(most->second.worst_ratio) + " at step " +
         std::to_string(most->second.worst_step);
}

}  // namespace

std::string slowest_rank_problem(const nlohmann::json& row) {
  const auto rank = row.find("slowest_rank");
  if (rank == row.end() || !rank->is_number()) return "";
  const double r = rank->get<double>();
  if (!(r >= 0 && r < kMaxRank && r == std::floor(r))) return "\"slowest_rank\" must be a rank (a whole number >= 0)";
  return "";
}

void StragglerTally::add(std::int64_t step, const nlohmann::json& row) {
  const auto rank = row.find("slowest_rank"), ratio = row.find("slowest_rank_ratio");
  if (rank == row.end() || ratio == row.end() || !rank->is_number() || !ratio->is_number()) return;
  Rank& r = ranks[static_cast<int>(rank->get<double>())];
  const double x = ratio->get<double>();
  ++steps;
  ++r.steps;
  r.ratio_sum += x;
  if (r.steps == 1 || x > r.worst_ratio) r.worst_ratio = x, r.worst_step = step;
}

std::string stragglers_section(const RunMetrics& metrics, const std::vector<SegmentJob>& jobs,
                               const std::vector<Boundary>& boundaries) {
  std::ostringstream out;
  out << "<h2>Stragglers</h2>\n";
  const bool any = std::any_of(jobs.begin(), jobs.end(), [](const SegmentJob& s) { return s.segment->stragglers.steps > 0; });
  if (!any) {
    out << "<p class=\"note\">The metrics name no slowest rank (runs before ptrain recorded it).</p>\n";
    return out.str();
  }
  std::vector<Level> limits;  // each segment's logging.straggler_ratio
  for (const SegmentJob& s : jobs)
    if (s.loaded)
      limits.push_back({static_cast<double>(s.segment->first_step) - 0.5, static_cast<double>(s.segment->last_step) + 0.5,
                        s.loaded->job.spec.logging.straggler_ratio});
  out << "<div class=\"charts\">\n"
      << line_chart({"Slowest rank's compute over the median rank's", "x median",
                     {{"slowest rank", "#d62728", metrics.curve("slowest_rank_ratio")}}, limits,
                     "logging.straggler_ratio", boundaries})
      << "</div>\n";
  out << "<table id=\"stragglers\"><tr><th>segment</th><th>steps</th><th>slowest most often</th>"
         "<th>worst step</th><th>warns above</th></tr>";
  for (const SegmentJob& s : jobs) {
    const RunSegment& seg = *s.segment;
    const std::string often = most_often(seg.stragglers);
    out << "<tr><td>" << seg.number << "</td><td>" << seg.first_step << "-" << seg.last_step << "</td><td>"
        << (often.empty() ? "(not recorded)" : html_escape(often)) << "</td><td>" << html_escape(worst(seg.stragglers))
        << "</td><td>"
        << (s.loaded ? ratio_text(s.loaded->job.spec.logging.straggler_ratio) + " for " +
                           std::to_string(s.loaded->job.spec.logging.straggler_steps) + " steps in a row"
                     : std::string("-"))
        << "</td></tr>";
  }
  out << "</table>\n<p class=\"note\">A rank's compute is its forward and backward outside its collectives; it is set "
         "against the median of the ranks of its pipeline stage (1.00x: no rank slower than its peers).</p>\n";
  return out.str();
}

}  // namespace ptrain::app
