// Renderers: the terminal drawing, SVG and Chrome trace of simulated schedules.
#include "engine/pipeline/render.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "tests/pipeline/schedule_cases.h"

using ptrain::config::ScheduleKind;
namespace config = ptrain::config;
using namespace ptrain::pipeline;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whitespace-separated tokens of a drawing row (between "|" and the final "| idle").
std::vector<std::string> cells_of(const std::string& row) {
  const size_t begin = row.find('|') + 1, end = row.rfind('|');
  std::istringstream in(row.substr(begin, end - begin));
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  return tokens;
}

int count_prefix(const std::vector<std::string>& tokens, char op) {
  int n = 0;
  for (const auto& t : tokens) n += t[0] == op;
  return n;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every start tag closed by the matching end tag, in nesting order (no DTD, comments or CDATA).
bool tags_balanced(const std::string& xml) {
  std::vector<std::string> open;
  for (size_t at = xml.find('<'); at != std::string::npos; at = xml.find('<', at + 1)) {
    const size_t close = xml.find('>', at);
    if (close == std::string::npos) return false;
    const std::string tag = xml.substr(at + 1, close - at - 1);
    if (tag.empty() || tag[0] == '?') continue;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
  }
  return open.empty();
}

struct Drawn {
  Schedule schedule;
  SimResult sim;
};

Drawn simulated(ScheduleKind kind, int pp, int vpp, int m) {
  Schedule s = build(kind, pp, vpp, m);
  SimResult sim =
      simulate(s, OpCosts::uniform(s, 1.0 / vpp, 2.0 / vpp, s.split_weight_grad ? 1.0 / vpp : 0.0));
  return {std::move(s), std::move(sim)};
}

}  // namespace

TEST_CASE("ascii: header, one row per rank, one F/B cell per op") {
  const auto [s, sim] = simulated(ScheduleKind::OneFOneB, 4, 1, 8);
  const std::string text = render_ascii(s, sim);
  INFO(text);
  const auto lines = lines_of(text);
  REQUIRE(lines.size() == 2 + 4);
  CHECK(lines[0].find("1f1b pp=4 vpp=1 microbatches=8, bubble 27.3% (rank 0, computing most)") == 0);
  CHECK(lines[1].find("1 cell = 1.00 s") != std::string::npos);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string& row = lines[2 + rank];
    CHECK(row.find("rank " + std::to_string(rank) + " |") == 0);
    CHECK(row.size() <= 160);
    const auto cells = cells_of(row);
    CHECK(count_prefix(cells, 'F') == 8);
    CHECK(count_prefix(cells, 'B') == 8);
    CHECK(count_prefix(cells, '.') == 9);  // (p-1)*(F+B) idle cells of 1 s
  }
  CHECK(lines[2].find("F0 F1 F2 F3 .") != std::string::npos);
  CHECK(lines[5].find("| idle 27.3%") != std::string::npos);
}

TEST_CASE("ascii: interleaved labels carry the chunk") {
  const auto [s, sim] = simulated(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  const auto lines = lines_of(render_ascii(s, sim));
  REQUIRE(lines.size() == 4);
  const auto cells = cells_of(lines[2]);
  CHECK(cells[0] == "F0.0");
  CHECK(count_prefix(cells, 'F') == 8);
  CHECK(std::count(cells.begin(), cells.end(), "B3.1") == 1);
}

TEST_CASE("ascii: zb-h1 shows W cells") {
  const auto [s, sim] = simulated(ScheduleKind::ZbH1, 4, 1, 8);
  const auto lines = lines_of(render_ascii(s, sim));
  for (int rank = 0; rank < 4; ++rank) CHECK(count_prefix(cells_of(lines[2 + rank]), 'W') == 8);
  CHECK(lines[1].find("W weight grad") != std::string::npos);
}

TEST_CASE("ascii: too wide drawings are scaled and say so") {
  const auto [s, sim] = simulated(ScheduleKind::OneFOneB, 8, 1, 64);
  const std::string text = render_ascii(s, sim, 100);
  INFO(text);
  const auto lines = lines_of(text);
  REQUIRE(lines.size() == 2 + 8);
  CHECK(lines[1].find("scaled to fit 100 columns: 1 character = ") == 0);
  for (int rank = 0; rank < 8; ++rank) {
    CHECK(lines[2 + rank].size() <= 100);
    CHECK(lines[2 + rank].find_first_of("FB") != std::string::npos);
  }
}

TEST_CASE("ascii: scaled, a rank of short ops beside a long one is not drawn idle") {
  // zb-h1 at pp 4 with a last stage 30 times the others' (the head of a large vocabulary, as the
  // demo's job at pp 4): scaled to fit, ranks 0-2 drew as '.' from end to end (at most one F).
  const Schedule s = build(ScheduleKind::ZbH1, 4, 1, 8);
  OpCosts costs = OpCosts::uniform(s, 1.0, 1.0, 1.0);
  costs.forward[3] = costs.backward[3] = costs.weight_grad[3] = 30.0;
  const SimResult sim = simulate(s, costs);
  const std::string text = render_ascii(s, sim, 160);
  INFO(text);
  const auto lines = lines_of(text);
  REQUIRE(lines.size() == 2 + 4);
  CHECK(lines[1].find("scaled to fit 160 columns") == 0);
  CHECK(lines[1].find("lower case: work, but less than the idle time in it") != std::string::npos);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string& row = lines[2 + rank];
    const std::string drawn = row.substr(row.find('|') + 1, row.rfind('|') - row.find('|') - 1);
    const auto work = std::count_if(drawn.begin(), drawn.end(), [](char c) { return std::isalpha(c) != 0; });
    CHECK(work >= 8);  // 24 ops of one cell each, a few sharing a character
    CHECK(drawn.find_first_of("fF") != std::string::npos);
    CHECK(drawn.find_first_of("bB") != std::string::npos);
  }
  const std::string& last = lines[5];
  CHECK(last.find_first_of("fbw") == std::string::npos);  // the busy rank fills its characters
}

TEST_CASE("svg: a standalone document with one rect per op") {
  for (auto kind : ptrain::pipeline::testing::kAllKinds) {
    const auto [s, sim] = simulated(kind, 4, ptrain::pipeline::testing::least_vpp(kind), 8);
    const std::string svg = render_svg(s, sim);
    INFO(config::to_string(kind));
    CHECK(svg.rfind("<?xml version=\"1.0\"", 0) == 0);
    CHECK(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
    CHECK(tags_balanced(svg));
    CHECK(count(svg, "<rect class=\"op\"") == s.compute_ops());
    CHECK(count(svg, "<rect class=\"legend\"") == (s.split_weight_grad ? 3 : 2) * s.vpp);  // kind x chunk
    CHECK(svg.find(std::string(config::to_string(kind)) + " pp=4") != std::string::npos);
    CHECK(svg.find(">rank 3</text>") != std::string::npos);
  }
}

namespace {

// The right edge of the last op drawn, and the drawing's width (its width="..." attribute).
std::pair<double, double> op_extent_and_width(const std::string& svg) {
  double right = 0;
  for (size_t at = svg.find("<rect class=\"op\""); at != std::string::npos; at = svg.find("<rect class=\"op\"", at + 1)) {
    const double x = std::stod(svg.substr(svg.find("x=\"", at) + 3));
    const double w = std::stod(svg.substr(svg.find("width=\"", at) + 7));
    right = std::max(right, x + w);
  }
  return {right, std::stod(svg.substr(svg.find("width=\"", svg.find("<svg")) + 7))};
}

}  // namespace

TEST_CASE("svg: drawings on one time axis share its scale, and titles and notes fit the drawing") {
  // The report draws a measured step beside a simulated one: drawn each at its own scale, a 525 ms
  // step looked as long as a 181 ms one.
  const auto [s, sim] = simulated(ScheduleKind::OneFOneB, 4, 1, 8);  // makespan 33 s
  SimResult twice = sim;
  twice.makespan *= 2;
  for (auto& spans : twice.timeline)
    for (Span& span : spans) span.start *= 2, span.end *= 2;
  const SvgTimeAxis axis{twice.makespan, 1280};
  const auto [short_right, short_width] = op_extent_and_width(render_svg(s, sim, axis));
  const auto [long_right, long_width] = op_extent_and_width(render_svg(s, twice, axis));
  CHECK(short_width == 1280);
  CHECK(long_width == 1280);
  const double left = 80;  // the rank names' column
  CHECK((long_right - left) == Approx(2 * (short_right - left)).epsilon(1e-3));
  CHECK(long_right == Approx(1280 - 24).epsilon(1e-3));  // the longer fills the plot

  // Without an axis, never narrower than the title and the legend's notes (11 px text at 0.62 em a
  // character, the 14 px bold title at 0.68): "makespan 410 m" was cut off at a drawing's edge.
  for (auto kind : ptrain::pipeline::testing::kAllKinds) {
    const auto [ks, ksim] = simulated(kind, 2, ptrain::pipeline::testing::least_vpp(kind), 2);
    const std::string svg = render_svg(ks, ksim);
    INFO(config::to_string(kind));
    const size_t title = svg.find("class=\"title\"");
    REQUIRE(title != std::string::npos);
    const size_t begin = svg.find('>', title) + 1;
    const double title_chars = static_cast<double>(svg.find("</text>", begin) - begin);
    CHECK(op_extent_and_width(svg).second >= 80 + title_chars * 14 * 0.68 + 24);
  }
}

TEST_CASE("chrome trace: one complete event per op, in microseconds") {
  for (auto kind : ptrain::pipeline::testing::kAllKinds) {
    const int pp = 4, vpp = ptrain::pipeline::testing::least_vpp(kind), m = 8;
    const auto [s, sim] = simulated(kind, pp, vpp, m);
    const auto trace = nlohmann::json::parse(render_chrome_trace(s, sim));
    INFO(config::to_string(kind));
    int complete = 0, w = 0;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") != "X") continue;
      ++complete;
      CHECK(e.at("pid") == 0);
      CHECK(e.at("tid").get<int>() >= 0);
      CHECK(e.at("tid").get<int>() < pp);
      const std::string name = e.at("name");
      const int mb = e.at("args").at("microbatch"), chunk = e.at("args").at("chunk");
      CHECK(name == name.substr(0, 1) + " mb" + std::to_string(mb) + " c" + std::to_string(chunk));
      w += name[0] == 'W';
      const double expected_us = (name[0] == 'F' ? 1e6 : name[0] == 'B' ? 2e6 : 1e6) / vpp;
      CHECK(e.at("dur").get<double>() == Approx(expected_us));
    }
    CHECK(complete == (s.split_weight_grad ? 3 : 2) * m * vpp * pp);
    CHECK(w == (s.split_weight_grad ? m * vpp * pp : 0));
  }
}

TEST_CASE("dualpipev's F&B pairs in the drawings") {
  const auto [s, sim] = simulated(ScheduleKind::DualPipeV, 4, 2, 10);
  int pairs = 0;
  for (const auto& list : s.ranks)
    for (const Instr& in : list) pairs += in.overlapped;
  REQUIRE(pairs > 0);

  const std::string text = render_ascii(s, sim, 1000);
  INFO(text);
  CHECK(count(text, "&") == pairs + 2);  // each pair's F, and "F3.0& ... an F&B pair" in the legend
  CHECK(text.find("run F then B as ptrain's executor does") != std::string::npos);

  const std::string svg = render_svg(s, sim);
  CHECK(tags_balanced(svg));
  CHECK(count(svg, "<rect class=\"pair\"") == pairs);
  CHECK(count(svg, "&") == count(svg, "&amp;"));  // escaped in the labels and the legend

  int marked = 0;
  const auto trace = nlohmann::json::parse(render_chrome_trace(s, sim));
  for (const auto& e : trace.at("traceEvents"))
    marked += e.at("ph") == "X" && e.at("args").contains("pair");
  CHECK(marked == 3 * pairs);  // each pair's F, B and W

  OpCosts costs = OpCosts::uniform(s, 0.5, 0.5, 0.5);
  costs.forward_backward.assign(static_cast<size_t>(s.virtual_stages()), 1.2);
  CHECK(render_ascii(s, simulate(s, costs), 100).find("timed as one overlapped op") != std::string::npos);
}
