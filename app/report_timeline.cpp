#include "app/report_timeline.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "engine/dist/trace.h"

namespace ptrain::app {

std::optional<MeasuredStep> measured_step(const nlohmann::json& trace, int pp) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) return std::nullopt;
  const nlohmann::json& events = trace["traceEvents"];
  // pp rank -> pid of the replica at tp 0, dp 0, ep 0
  std::map<int, int> pid_of;
  const std::regex coordinates(R"(pp (\d+), tp (\d+), dp (\d+), ep (\d+))");
  for (const auto& e : events) {
    if (e.value("ph", "") != "M" || e.value("name", "") != "process_name" || !e.contains("args")) continue;
    std::smatch m;
    const std::string label = e["args"].value("name", "");
    if (std::regex_search(label, m, coordinates) && m[2] == "0" && m[3] == "0" && m[4] == "0")
      pid_of[std::stoi(m[1])] = e.value("pid", -1);
  }
  if (static_cast<int>(pid_of.size()) != pp) return std::nullopt;
  // Each rank's step spans, then the last step all of them have.
  std::map<int, std::map<std::int64_t, std::pair<double, double>>> steps;  // pid -> step -> [begin, end] us
  std::set<std::int64_t> common;
  for (const auto& e : events) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") != "X" || name.rfind("step ", 0) != 0) continue;
    const double ts = e.value("ts", 0.0);
    steps[e.value("pid", -1)][std::stoll(name.substr(5))] = {ts, ts + e.value("dur", 0.0)};
  }
  for (const auto& [step, _] : steps[pid_of.begin()->second]) {
    bool everywhere = true;
    for (const auto& [rank, pid] : pid_of) everywhere = everywhere && steps[pid].count(step) > 0;
    if (everywhere) common.insert(step);
  }
  if (common.empty()) return std::nullopt;
  MeasuredStep out;
  out.step = *common.rbegin();
  double t0 = 1e300;
  for (const auto& [rank, pid] : pid_of) t0 = std::min(t0, steps[pid][out.step].first);
  pipeline::SimResult& sim = out.timeline;
  sim.timeline.assign(static_cast<std::size_t>(pp), {});
  sim.busy.assign(static_cast<std::size_t>(pp), 0.0);
  std::map<int, int> rank_of;  // pid -> pp rank
  for (const auto& [rank, pid] : pid_of) rank_of[pid] = rank;
  auto is_pipeline_op = [](const nlohmann::json& e) {
    const std::string name = e.value("name", "");
    return e.value("ph", "") == "X" && name.size() >= 2 && name[1] == ' ' &&
           std::string("FBW").find(name[0]) != std::string::npos;
  };
  // A rank whose device ran the ops (CUDA: the compute stream's track) is read there, where each op
  // took its time, rather than on the host's track, where it was issued.
  std::set<int> on_device;
  for (const auto& e : events)
    if (is_pipeline_op(e) && e.value("tid", -1) == dist::Trace::kDevice) on_device.insert(e.value("pid", -1));
  for (const auto& e : events) {
    if (!is_pipeline_op(e)) continue;
    const std::string name = e.value("name", "");
    const int pid = e.value("pid", -1);
    const auto rank = rank_of.find(pid);
    if (rank == rank_of.end() || !e.contains("args")) continue;
    if (e.value("tid", -1) != (on_device.count(pid) > 0 ? dist::Trace::kDevice : dist::Trace::kSteps)) continue;
    const auto [begin, end] = steps[pid][out.step];
    const double ts = e.value("ts", 0.0), te = ts + e.value("dur", 0.0);
    if (ts < begin || te > end) continue;
    const pipeline::Op op = name[0] == 'F'   ? pipeline::Op::Forward
                            : name[0] == 'B' ? pipeline::Op::Backward
                                             : pipeline::Op::WeightGrad;
    const auto r = static_cast<std::size_t>(rank->second);
    sim.timeline[r].push_back(
        {op, e["args"].value("microbatch", 0), e["args"].value("chunk", 0), (ts - t0) * 1e-6, (te - t0) * 1e-6});
    sim.busy[r] += (te - ts) * 1e-6;
    sim.makespan = std::max(sim.makespan, (te - t0) * 1e-6);
  }
  for (std::size_t r = 0; r < sim.busy.size(); ++r) {
    sim.bubble_fraction.push_back(sim.makespan > 0 ? 1 - sim.busy[r] / sim.makespan : 0);
    sim.bubble_fraction_max = std::max(sim.bubble_fraction_max, sim.bubble_fraction.back());
  }
  return out;
}

}  // namespace ptrain::app
