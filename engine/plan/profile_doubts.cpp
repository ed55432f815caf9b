#include "engine/plan/profile_doubts.h"

#include <cstdio>
#include <functional>

namespace ptrain::plan {
namespace {

std::string duration(double s) {
  char text[32];
  if (s < 1e-3)
    std::snprintf(text, sizeof text, "%.0f us", s * 1e6);
  else if (s < 1)
    std::snprintf(text, sizeof text, "%.2f ms", s * 1e3);
  else
    std::snprintf(text, sizeof text, "%.2f s", s);
  return text;
}

// The worst place in one table where more work ran faster than kMonotoneSlack allows.
class Monotone {
 public:
  // `smaller` and `larger` are the two points' times, `at_smaller` and `at_larger` where they are.
  void compare(const std::string& what, double smaller, double larger, const std::string& at_smaller,
               const std::string& at_larger) {
    const double faster = smaller / larger;
    if (faster <= kMonotoneSlack || faster <= worst_) return;
    worst_ = faster;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.1fx", faster);
    why_ = what + " takes " + duration(smaller) + " at " + at_smaller + " but " + duration(larger) + " at " +
           at_larger + ": more work, " + ratio + " faster";
  }
  const std::string& why() const { return why_; }

 private:
  double worst_ = 0;
  std::string why_;
};

std::string gemm_point(const GemmTable& g, std::size_t i, std::size_t j, std::size_t l) {
  return std::to_string(g.m[i]) + " x " + std::to_string(g.n[j]) + " x " + std::to_string(g.k[l]) + " (m x n x k)";
}

std::string check_gemm(const GemmTable& g) {
  Monotone worst;
  const std::size_t M = g.m.size(), N = g.n.size(), K = g.k.size();
  auto at = [&](std::size_t i, std::size_t j, std::size_t l) { return (i * N + j) * K + l; };
  for (const auto& [what, times] : {std::pair{"forward", &g.forward_s}, std::pair{"input gradient", &g.input_grad_s},
                                    std::pair{"weight gradient", &g.weight_grad_s}})
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t l = 0; l < K; ++l) {
          const double t = (*times)[at(i, j, l)];
          const std::string here = gemm_point(g, i, j, l);
          if (i + 1 < M) worst.compare(what, t, (*times)[at(i + 1, j, l)], here, gemm_point(g, i + 1, j, l));
          if (j + 1 < N) worst.compare(what, t, (*times)[at(i, j + 1, l)], here, gemm_point(g, i, j + 1, l));
          if (l + 1 < K) worst.compare(what, t, (*times)[at(i, j, l + 1)], here, gemm_point(g, i, j, l + 1));
        }
  return worst.why();
}

std::string check_attention(const std::vector<AttentionTable>& tables) {
  Monotone worst;
  for (const AttentionTable& a : tables)
    for (const auto& [what, times] : {std::pair{"forward", &a.forward_s}, std::pair{"backward", &a.backward_s}})
      for (std::size_t i = 0; i + 1 < a.seq.size(); ++i)
        worst.compare(std::string(what) + " (head_dim " + std::to_string(a.head_dim) + ")", (*times)[i],
                      (*times)[i + 1], "seq " + std::to_string(a.seq[i]), "seq " + std::to_string(a.seq[i + 1]));
  return worst.why();
}

std::string bytes_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f KiB", bytes / 1024);
  return text;
}

// Points along bytes: `bytes(i)` and `time(i)` of each.
void check_points(const char* what, std::size_t count, const std::function<double(std::size_t)>& bytes,
                  const std::function<double(std::size_t)>& time, Monotone& worst) {
  for (std::size_t i = 0; i + 1 < count; ++i)
    worst.compare(what, time(i), time(i + 1), bytes_text(bytes(i)), bytes_text(bytes(i + 1)));
}

std::string check_memory(const std::vector<MemoryPoint>& points) {
  Monotone worst;
  auto bytes = [&](std::size_t i) { return points[i].bytes; };
  check_points("forward", points.size(), bytes, [&](std::size_t i) { return points[i].forward_s; }, worst);
  check_points("backward", points.size(), bytes, [&](std::size_t i) { return points[i].backward_s; }, worst);
  return worst.why();
}

std::string check_collective(const std::vector<std::pair<double, double>>& points) {
  Monotone worst;
  check_points("one call", points.size(), [&](std::size_t i) { return points[i].first; },
               [&](std::size_t i) { return points[i].second; }, worst);
  return worst.why();
}

}  // namespace

std::vector<ProfileDoubt> profile_doubts(const MeasuredProfile& profile, const std::map<std::string, double>& spread) {
  std::map<std::string, std::string> why;  // by table, in the profile's order of names
  auto doubt = [&](const std::string& table, const std::string& reason) {
    if (reason.empty()) return;
    std::string& to = why[table];
    to += (to.empty() ? "" : "; ") + reason;
  };
  if (profile.backend == "cpu") {
    for (const auto& [element, g] : profile.gemm) doubt("gemm/" + element, check_gemm(g));
    for (const auto& [element, tables] : profile.attention) doubt("attention/" + element, check_attention(tables));
    for (const auto& [family, points] : profile.memory)
      if (family.rfind("gelu/", 0) != 0) doubt(family, check_memory(points));
    if (profile.collectives)
      for (const auto& [kind, points] : profile.collectives->points)
        doubt("collectives/" + kind, check_collective(points));
  }
  for (const auto& [table, ratio] : spread) {
    if (ratio <= kSpreadLimit) continue;
    char text[96];
    std::snprintf(text, sizeof text, "the repeats of one point differ by %.1fx (second slowest over second fastest)",
                  ratio);
    doubt(table, text);
  }
  if (const auto& c = profile.calibration; c && (c->compute_scale > kCalibrationLimit ||
                                                 c->compute_scale < 1 / kCalibrationLimit)) {
    char text[160];
    std::snprintf(text, sizeof text, "the reference step computed for %s where the tables predict %s (x%.2f)",
                  duration(c->compute_scale * c->predicted_compute_s).c_str(), duration(c->predicted_compute_s).c_str(),
                  c->compute_scale);
    doubt("calibration", text);
  }
  std::vector<ProfileDoubt> out;
  for (auto& [table, reason] : why) out.push_back({table, std::move(reason)});
  return out;
}

}  // namespace ptrain::plan
