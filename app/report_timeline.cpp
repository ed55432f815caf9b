#include "app/report_timeline.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>

#include "engine/comm/trace.h"

namespace ptrain::app {
namespace {

// Typed reads of one trace event: an event that is not an object, or holds a field this reader uses
// with another type than logging.trace writes, is refused (std::invalid_argument) on construction,
// whether or not the event is one the page draws.
class Event {
 public:
  Event(const nlohmann::json& e, std::size_t position) : e_(e), position_(position) {
    if (!e.is_object()) fail("is not an object");
    text("ph"), text("name"), microseconds("ts"), microseconds("dur"), whole("pid", -1), whole("tid", -1);
    whole(args(), "microbatch", 0), whole(args(), "chunk", 0);
  }
  std::string text(const char* key) const {
    if (!e_.contains(key)) return "";
    if (!e_[key].is_string()) fail(std::string("\"") + key + "\" is not a string");
    return e_[key].get<std::string>();
  }
  // A time ("ts", "dur") in microseconds, from 0 to 10^15 (31 years); 0 when absent.
  double microseconds(const char* key) const {
    if (!e_.contains(key)) return 0.0;
    if (!e_[key].is_number()) fail(std::string("\"") + key + "\" is not a number");
    const double us = e_[key].get<double>();
    if (!(us >= 0 && us <= 1e15)) fail(std::string("\"") + key + "\" is not a time from 0 to 1e15 microseconds");
    return us;
  }
  // A whole number in [0, INT_MAX] (pid, tid, microbatch, chunk); `fallback` when absent.
  int whole(const nlohmann::json& holder, const char* key, int fallback) const {
    if (!holder.is_object() || !holder.contains(key)) return fallback;
    const nlohmann::json& v = holder[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > std::numeric_limits<int>::max())
      fail(std::string("\"") + key + "\" is not a whole number from 0 to 2^31 - 1");
    return v.get<int>();
  }
  int whole(const char* key, int fallback) const { return whole(e_, key, fallback); }
  const nlohmann::json& args() const {
    static const nlohmann::json none = nlohmann::json::object();
    if (!e_.contains("args")) return none;
    if (!e_["args"].is_object()) fail("\"args\" is not an object");
    return e_["args"];
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument("traceEvents[" + std::to_string(position_) + "] " + why);
  }

 private:
  const nlohmann::json& e_;
  std::size_t position_;
};

// The N of "step N", or a failure naming the event.
std::int64_t step_number(const std::string& name, const Event& e) {
  std::int64_t n = 0;
  const char* end = name.data() + name.size();
  const auto [stop, error] = std::from_chars(name.data() + 5, end, n);
  if (error != std::errc() || stop != end || n < 0) e.fail("is named \"" + name + "\", not \"step N\"");
  return n;
}

}  // namespace

std::optional<MeasuredStep> measured_step(const nlohmann::json& trace, int pp) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw std::invalid_argument("no \"traceEvents\" array");
  const nlohmann::json& events = trace["traceEvents"];
  // pp rank -> pid of the replica at tp 0, cp 0, dp 0, ep 0 (traces before cp was in the label: none)
  std::map<int, int> pid_of;
  const std::regex coordinates(R"(pp (\d{1,9}), tp (\d+)(?:, cp (\d+))?, dp (\d+), ep (\d+))");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event e(events[i], i);
    if (e.text("ph") != "M" || e.text("name") != "process_name") continue;
    const nlohmann::json& args = e.args();
    if (!args.contains("name")) continue;
    if (!args["name"].is_string()) e.fail("\"args.name\" is not a string");
    const std::string label = args["name"].get<std::string>();
    std::smatch m;
    if (std::regex_search(label, m, coordinates) && m[2] == "0" && (!m[3].matched || m[3] == "0") && m[4] == "0" &&
        m[5] == "0")
      pid_of[std::stoi(m[1])] = e.whole("pid", -1);
  }
  // The stages must be this job's 0..pp-1 (the labels are distinct: pp of them ending at pp - 1); a
  // trace of another layout has no step of this one.
  if (static_cast<int>(pid_of.size()) != pp || pid_of.rbegin()->first != pp - 1) return std::nullopt;
  // Each rank's step spans, then the last step all of them have.
  std::map<int, std::map<std::int64_t, std::pair<double, double>>> steps;  // pid -> step -> [begin, end] us
  std::set<std::int64_t> common;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event e(events[i], i);
    const std::string name = e.text("name");
    if (e.text("ph") != "X" || name.rfind("step ", 0) != 0) continue;
    const double ts = e.microseconds("ts");
    steps[e.whole("pid", -1)][step_number(name, e)] = {ts, ts + e.microseconds("dur")};
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
  auto is_pipeline_op = [](const Event& e) {
    const std::string name = e.text("name");
    return e.text("ph") == "X" && name.size() >= 2 && name[1] == ' ' && std::string("FBW").find(name[0]) != std::string::npos;
  };
  // A rank whose device ran the ops (CUDA: the compute stream's track) is read there, where each op
  // took its time, rather than on the host's track, where it was issued.
  std::set<int> on_device;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event e(events[i], i);
    if (is_pipeline_op(e) && e.whole("tid", -1) == dist::Trace::kDevice) on_device.insert(e.whole("pid", -1));
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event e(events[i], i);
    if (!is_pipeline_op(e)) continue;
    const int pid = e.whole("pid", -1);
    const auto rank = rank_of.find(pid);
    if (rank == rank_of.end() || !events[i].contains("args")) continue;
    if (e.whole("tid", -1) != (on_device.count(pid) > 0 ? dist::Trace::kDevice : dist::Trace::kSteps)) continue;
    const auto [begin, end] = steps[pid][out.step];
    const double ts = e.microseconds("ts"), te = ts + e.microseconds("dur");
    if (ts < begin || te > end) continue;
    const char kind = e.text("name")[0];
    const pipeline::Op op = kind == 'F' ? pipeline::Op::Forward : kind == 'B' ? pipeline::Op::Backward
                                                                               : pipeline::Op::WeightGrad;
    const auto r = static_cast<std::size_t>(rank->second);
    sim.timeline[r].push_back(
        {op, e.whole(e.args(), "microbatch", 0), e.whole(e.args(), "chunk", 0), (ts - t0) * 1e-6, (te - t0) * 1e-6});
    sim.busy[r] += (te - ts) * 1e-6;
    sim.makespan = std::max(sim.makespan, (te - t0) * 1e-6);
  }
  pipeline::account_idle(sim);  // the bubble as validate's simulation defines it
  return out;
}

std::optional<std::string> trace_job_digest(const nlohmann::json& trace) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) return std::nullopt;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("name", nlohmann::json()) != "job" || e.value("cat", nlohmann::json()) != "record")
      continue;
    const auto args = e.find("args");
    if (args != e.end() && args->is_object() && args->contains("job_digest") && (*args)["job_digest"].is_string())
      return (*args)["job_digest"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace ptrain::app
