#include "engine/plan/measured_profile.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ptrain::plan {
namespace {

using nlohmann::json;

constexpr const char* kSchema = "ptrain.profile.v2";

// Where x falls on an ascending grid, in log space: between points lo and hi with weight t of hi
// (clamped to the ends: lo = hi, t = 0).
struct Bracket {
  std::size_t lo = 0, hi = 0;
  double t = 0;
};
Bracket bracket(const std::vector<std::int64_t>& grid, double x) {
  if (x <= static_cast<double>(grid.front())) return {0, 0, 0};
  if (x >= static_cast<double>(grid.back())) return {grid.size() - 1, grid.size() - 1, 0};
  std::size_t i = 0;
  while (static_cast<double>(grid[i + 1]) <= x) ++i;
  const double a = std::log(static_cast<double>(grid[i])), b = std::log(static_cast<double>(grid[i + 1]));
  return {i, i + 1, (std::log(x) - a) / (b - a)};
}
double clamp_to(const std::vector<std::int64_t>& grid, double x) {
  return std::clamp(x, static_cast<double>(grid.front()), static_cast<double>(grid.back()));
}

double gemm_seconds(const GemmTable& g, const std::vector<double>& s, const model::GemmShape& shape) {
  const double m = static_cast<double>(shape.m), n = static_cast<double>(shape.n), k = static_cast<double>(shape.k);
  const Bracket bm = bracket(g.m, m), bn = bracket(g.n, n), bk = bracket(g.k, k);
  double log_seconds = 0;
  for (int corner = 0; corner < 8; ++corner) {
    const bool hm = corner & 1, hn = corner & 2, hk = corner & 4;
    const double w = (hm ? bm.t : 1 - bm.t) * (hn ? bn.t : 1 - bn.t) * (hk ? bk.t : 1 - bk.t);
    if (w == 0) continue;
    const std::size_t i = hm ? bm.hi : bm.lo, j = hn ? bn.hi : bn.lo, l = hk ? bk.hi : bk.lo;
    log_seconds += w * std::log(s[(i * g.n.size() + j) * g.k.size() + l]);
  }
  // Outside the grid the edge's throughput holds: scale by the FLOPs beyond it.
  const double beyond = (m * n * k) / (clamp_to(g.m, m) * clamp_to(g.n, n) * clamp_to(g.k, k));
  return std::exp(log_seconds) * beyond * static_cast<double>(shape.count);
}

double pairs_per_head(std::int64_t seq) { return static_cast<double>(seq) * (seq + 1) / 2.0; }

// Seconds of attention per query-key pair, head and sequence at `keys`, from one table.
double pair_seconds(const AttentionTable& a, const std::vector<double>& s, double keys) {
  const Bracket b = bracket(a.seq, keys);
  auto at = [&](std::size_t i) {
    return std::log(s[i] / (static_cast<double>(a.batch) * a.heads * pairs_per_head(a.seq[i])));
  };
  return std::exp((1 - b.t) * at(b.lo) + b.t * at(b.hi));
}

OpSeconds attention_seconds(const std::vector<AttentionTable>& tables, const model::AttentionShape& shape) {
  const AttentionTable* best = nullptr;
  for (const AttentionTable& a : tables)
    if (best == nullptr || std::abs(std::log(static_cast<double>(a.head_dim) / shape.head_dim)) <
                               std::abs(std::log(static_cast<double>(best->head_dim) / shape.head_dim)))
      best = &a;
  double pairs = 0, keys = 0;
  for (const auto& q : shape.blocks) {
    pairs += static_cast<double>(q.rows) * q.first + pairs_per_head(q.rows);
    keys = std::max(keys, static_cast<double>(q.first + q.rows));
  }
  const double work = pairs * static_cast<double>(shape.batch) * shape.heads *
                      (static_cast<double>(shape.head_dim) / best->head_dim);
  return {work * pair_seconds(*best, best->forward_s, keys), work * pair_seconds(*best, best->backward_s, keys),
          0};
}

double interpolate_points(const std::vector<MemoryPoint>& points, double bytes, bool backward) {
  auto t = [&](std::size_t i) { return backward ? points[i].backward_s : points[i].forward_s; };
  if (points.size() == 1) return t(0) * bytes / points[0].bytes;
  std::size_t i = 0;
  while (i + 2 < points.size() && points[i + 1].bytes < bytes) ++i;
  const double slope = (t(i + 1) - t(i)) / (points[i + 1].bytes - points[i].bytes);
  return std::max(0.0, t(i) + slope * (bytes - points[i].bytes));
}

template <typename Map>
const auto& table(const Map& map, const std::string& key, const char* what) {
  auto it = map.find(key);
  if (it == map.end()) throw std::invalid_argument(std::string("the profile has no ") + what + " table for " + key);
  return it->second;
}

// Reading: every failure names the field.
// Bounds on what a profile may say, so that no estimate made from it overflows: an op of a day, an
// exabyte, a machine a thousand times off its tables.
constexpr double kMaxSeconds = 86400, kMaxBytes = 1e18, kMaxComputeScale = 1e3;

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw std::invalid_argument("profile field " + field + ": " + why);
}
const json& member(const json& j, const std::string& field, const std::string& path) {
  if (!j.is_object() || !j.contains(field)) bad(path + field, "missing");
  return j.at(field);
}
std::vector<std::int64_t> sizes(const json& j, const std::string& field, const std::string& path) {
  const json& v = member(j, field, path);
  if (!v.is_array() || v.empty()) bad(path + field, "must be a non-empty list of sizes");
  std::vector<std::int64_t> out;
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<std::int64_t>() <= 0) bad(path + field, "sizes must be positive integers");
    if (!out.empty() && x.get<std::int64_t>() <= out.back()) bad(path + field, "sizes must ascend");
    out.push_back(x.get<std::int64_t>());
  }
  return out;
}
std::vector<double> seconds(const json& j, const std::string& field, const std::string& path, std::size_t count) {
  const json& v = member(j, field, path);
  if (!v.is_array() || v.size() != count)
    bad(path + field, "must list " + std::to_string(count) + " times, one per grid point");
  std::vector<double> out;
  for (const json& x : v) {
    if (!x.is_number() || !(x.get<double>() > 0) || !(x.get<double>() <= kMaxSeconds))
      bad(path + field, "times must be positive seconds, at most a day");
    out.push_back(x.get<double>());
  }
  return out;
}
// A positive number up to `most`: seconds (kMaxSeconds), bytes (kMaxBytes), a scale.
double positive_number(const json& j, const std::string& field, const std::string& path, double most) {
  const json& v = member(j, field, path);
  if (!v.is_number() || !(v.get<double>() > 0) || !(v.get<double>() <= most))
    bad(path + field, "must be a positive number, at most " + json(most).dump());
  return v.get<double>();
}
double non_negative_number(const json& j, const std::string& field, const std::string& path) {
  const json& v = member(j, field, path);
  if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
    bad(path + field, "must be a number >= 0");
  return v.get<double>();
}
std::int64_t positive(const json& j, const std::string& field, const std::string& path) {
  const json& v = member(j, field, path);
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) bad(path + field, "must be a positive integer");
  return v.get<std::int64_t>();
}
std::string text(const json& j, const std::string& field, const std::string& path) {
  const json& v = member(j, field, path);
  if (!v.is_string()) bad(path + field, "must be a string");
  return v.get<std::string>();
}
// A count of threads or cores: a positive integer up to 2^20 (an int, as the model divides by it).
int count(const json& j, const std::string& field) {
  const std::int64_t n = positive(j, field, "");
  if (n > (1 << 20)) bad(field, "must be at most 1048576");
  return static_cast<int>(n);
}
bool flag(const json& j, const std::string& field, bool fallback) {
  if (!j.contains(field)) return fallback;
  if (!j[field].is_boolean()) bad(field, "must be true or false");
  return j[field].get<bool>();
}

json collectives_json(const CollectiveTable& t) {
  json c;
  c["ranks"] = t.ranks;
  c["transport"] = t.transport;
  for (const auto& [kind, points] : t.points)
    for (const auto& [bytes, seconds] : points) c[kind].push_back({{"bytes", bytes}, {"seconds", seconds}});
  return c;
}

CollectiveTable read_collectives(const json& c) {
  CollectiveTable t;
  t.ranks = static_cast<int>(positive(c, "ranks", "collectives."));
  if (t.ranks < 2) bad("collectives.ranks", "must be at least 2");
  t.transport = text(c, "transport", "collectives.");
  for (const model::CollectiveKind kind :
       {model::CollectiveKind::AllReduce, model::CollectiveKind::AllGather, model::CollectiveKind::ReduceScatter,
        model::CollectiveKind::AllToAll, model::CollectiveKind::SendRecv}) {
    const std::string name = collective_name(kind), path = "collectives." + name;
    const json& list = member(c, name, "collectives.");
    if (!list.is_array() || list.empty()) bad(path, "must be a non-empty list of points");
    auto& points = t.points[name];
    for (const json& point : list) {
      const double bytes = positive_number(point, "bytes", path + ".", kMaxBytes),
                   seconds = positive_number(point, "seconds", path + ".", kMaxSeconds);
      if (!points.empty() && bytes <= points.back().first) bad(path, "bytes must ascend");
      points.emplace_back(bytes, seconds);
    }
  }
  return t;
}

}  // namespace

const char* memory_family(model::OpKind kind) {
  switch (kind) {
    case model::OpKind::Norm: return "norm";
    case model::OpKind::LayerNorm: return "layernorm";
    case model::OpKind::Rope: return "rope";
    case model::OpKind::Activation: return "activation";
    case model::OpKind::Gelu: return "gelu";
    case model::OpKind::Routing: return "routing";
    case model::OpKind::Embedding: return "embedding";
    case model::OpKind::Loss: return "loss";
    case model::OpKind::Gemm:
    case model::OpKind::Attention:
    case model::OpKind::Collective: return nullptr;
  }
  return nullptr;
}

const char* element_name(bool bf16) { return bf16 ? "bf16" : "f32"; }

const char* collective_name(model::CollectiveKind kind) {
  switch (kind) {
    case model::CollectiveKind::AllReduce: return "all_reduce";
    case model::CollectiveKind::AllGather: return "all_gather";
    case model::CollectiveKind::ReduceScatter: return "reduce_scatter";
    case model::CollectiveKind::AllToAll: return "all_to_all";
    case model::CollectiveKind::SendRecv: return "send_recv";
  }
  return "";
}

std::optional<double> collective_seconds(const MeasuredProfile& profile, model::CollectiveKind kind, int ranks,
                                         double bytes) {
  if (!profile.collectives || ranks < 2) return std::nullopt;
  const CollectiveTable& t = *profile.collectives;
  auto it = t.points.find(collective_name(kind));
  if (it == t.points.end() || it->second.empty()) return std::nullopt;
  // Ring traffic per rank: all-reduce 2(n-1)/n S, the others (n-1)/n S, send/recv S.
  auto share = [&](int n) { return kind == model::CollectiveKind::SendRecv ? 1.0 : (n - 1.0) / n; };
  const double equivalent = bytes * share(ranks) / share(t.ranks);
  const auto& p = it->second;
  if (p.size() == 1) return p[0].second * equivalent / p[0].first;
  std::size_t i = 0;
  while (i + 2 < p.size() && p[i + 1].first < equivalent) ++i;
  const double slope = (p[i + 1].second - p[i].second) / (p[i + 1].first - p[i].first);
  return std::max(p[0].second * std::min(1.0, equivalent / p[0].first), p[i].second + slope * (equivalent - p[i].first));
}

double memory_seconds(const MeasuredProfile& profile, const std::string& name, double bytes, bool backward) {
  return interpolate_points(table(profile.memory, name, "memory"), bytes, backward);
}

OpSeconds gemm_op_seconds(const MeasuredProfile& profile, const model::Op& op, const std::string& element) {
  const GemmTable& g = table(profile.gemm, element, "GEMM");
  return {gemm_seconds(g, g.forward_s, op.gemm), gemm_seconds(g, g.input_grad_s, op.gemm),
          gemm_seconds(g, g.weight_grad_s, op.gemm)};
}

OpSeconds op_seconds(const MeasuredProfile& profile, const model::Op& op, bool bf16) {
  const std::string element = element_name(bf16);
  switch (op.kind) {
    case model::OpKind::Gemm:
      return gemm_op_seconds(profile, op, element);
    case model::OpKind::Attention:
      return attention_seconds(table(profile.attention, element, "attention"), op.attention);
    case model::OpKind::Collective:
      return {};
    default: {
      const auto& points = table(profile.memory, std::string(memory_family(op.kind)) + "/" + element, "memory");
      return {interpolate_points(points, op.memory_bytes, false), interpolate_points(points, op.memory_bytes, true), 0};
    }
  }
}

std::string to_json(const MeasuredProfile& p) {
  if (p.transfer) throw std::logic_error("a carried profile is not written: read back, it would be carried again");
  json j;
  j["schema"] = kSchema;
  j["device"] = p.device;
  j["backend"] = p.backend;
  j["date"] = p.date;
  j["ptrain"] = p.ptrain_version;
  j["versions"] = p.versions;
  if (p.cudnn_attention) j["cudnn_attention"] = kernels::to_string(*p.cudnn_attention);
  j["quick"] = p.quick;
  j["threads"] = p.threads;
  j["cores"] = p.cores;
  for (const auto& [element, g] : p.gemm)
    j["gemm"][element] = {{"m", g.m}, {"n", g.n}, {"k", g.k}, {"forward_s", g.forward_s},
                          {"input_grad_s", g.input_grad_s}, {"weight_grad_s", g.weight_grad_s}};
  for (const auto& [element, tables] : p.attention)
    for (const AttentionTable& a : tables)
      j["attention"][element].push_back({{"batch", a.batch}, {"heads", a.heads}, {"kv_heads", a.kv_heads},
                                         {"head_dim", a.head_dim}, {"seq", a.seq}, {"forward_s", a.forward_s},
                                         {"backward_s", a.backward_s}});
  for (const auto& [family, points] : p.memory)
    for (const MemoryPoint& m : points)
      j["memory"][family].push_back({{"bytes", m.bytes}, {"forward_s", m.forward_s}, {"backward_s", m.backward_s}});
  if (p.collectives) j["collectives"] = collectives_json(*p.collectives);
  if (p.accuracy)
    j["accuracy"] = {{"jobs", p.accuracy->jobs}, {"median_error", p.accuracy->median_error},
                     {"worst_error", p.accuracy->worst_error}, {"date", p.accuracy->date}, {"how", p.accuracy->how}};
  if (p.calibration)
    j["calibration"] = {{"job", p.calibration->job}, {"measured_step_s", p.calibration->measured_step_s},
                        {"predicted_compute_s", p.calibration->predicted_compute_s},
                        {"compute_scale", p.calibration->compute_scale}};
  if (p.calibration && !p.calibration->job_yaml.empty()) j["calibration"]["job_yaml"] = p.calibration->job_yaml;
  if (!p.doubts.empty()) j["doubts"] = p.doubts;
  return j.dump(1) + "\n";
}

std::string to_json(const CollectiveTable& table) { return collectives_json(table).dump(1) + "\n"; }

CollectiveTable collectives_from_json(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw std::invalid_argument("the collective table is not JSON");
  return read_collectives(j);
}

MeasuredProfile from_json(const std::string& source) {
  const json j = json::parse(source, nullptr, false);
  if (j.is_discarded()) throw std::invalid_argument("the profile is not JSON");
  if (text(j, "schema", "") != kSchema) bad("schema", std::string("must be ") + kSchema);
  MeasuredProfile p;
  p.device = text(j, "device", "");
  p.backend = text(j, "backend", "");
  p.date = text(j, "date", "");
  p.ptrain_version = text(j, "ptrain", "");
  if (j.contains("versions") && j["versions"].is_object())
    for (const auto& [name, value] : j["versions"].items())
      if (value.is_string()) p.versions[name] = value.get<std::string>();
  if (j.contains("cudnn_attention")) {
    const std::string mode = text(j, "cudnn_attention", "");
    p.cudnn_attention = kernels::parse_cudnn_attention_mode(mode.c_str());
    if (mode.empty() || !p.cudnn_attention) bad("cudnn_attention", "must be auto, fast, deterministic or off");
  }
  p.quick = flag(j, "quick", false);
  p.threads = count(j, "threads");
  p.cores = count(j, "cores");
  for (const auto& [element, g] : member(j, "gemm", "").items()) {
    const std::string path = "gemm." + element + ".";
    GemmTable t{sizes(g, "m", path), sizes(g, "n", path), sizes(g, "k", path), {}, {}, {}};
    const std::size_t points = t.m.size() * t.n.size() * t.k.size();
    t.forward_s = seconds(g, "forward_s", path, points);
    t.input_grad_s = seconds(g, "input_grad_s", path, points);
    t.weight_grad_s = seconds(g, "weight_grad_s", path, points);
    p.gemm[element] = std::move(t);
  }
  for (const auto& [element, list] : member(j, "attention", "").items()) {
    if (!list.is_array() || list.empty()) bad("attention." + element, "must be a non-empty list of tables");
    for (const json& a : list) {
      const std::string path = "attention." + element + ".";
      AttentionTable t;
      t.batch = positive(a, "batch", path);
      t.heads = positive(a, "heads", path);
      t.kv_heads = positive(a, "kv_heads", path);
      t.head_dim = positive(a, "head_dim", path);
      t.seq = sizes(a, "seq", path);
      t.forward_s = seconds(a, "forward_s", path, t.seq.size());
      t.backward_s = seconds(a, "backward_s", path, t.seq.size());
      p.attention[element].push_back(std::move(t));
    }
  }
  for (const auto& [family, list] : member(j, "memory", "").items()) {
    const std::string path = "memory." + family;
    if (!list.is_array() || list.empty()) bad(path, "must be a non-empty list of points");
    for (const json& m : list) {
      const MemoryPoint point{positive_number(m, "bytes", path + ".", kMaxBytes),
                              positive_number(m, "forward_s", path + ".", kMaxSeconds),
                              positive_number(m, "backward_s", path + ".", kMaxSeconds)};
      if (!p.memory[family].empty() && point.bytes <= p.memory[family].back().bytes) bad(path, "bytes must ascend");
      p.memory[family].push_back(point);
    }
  }
  if (j.contains("collectives")) p.collectives = read_collectives(j["collectives"]);
  if (j.contains("calibration")) {
    const json& c = j["calibration"];
    p.calibration = Calibration{text(c, "job", "calibration."),
                                positive_number(c, "measured_step_s", "calibration.", kMaxSeconds),
                                positive_number(c, "predicted_compute_s", "calibration.", kMaxSeconds),
                                positive_number(c, "compute_scale", "calibration.", kMaxComputeScale),
                                c.contains("job_yaml") ? text(c, "job_yaml", "calibration.") : std::string()};
    if (p.calibration->compute_scale < 1 / kMaxComputeScale)
      bad("calibration.compute_scale", "must be at least " + json(1 / kMaxComputeScale).dump());
  }
  if (j.contains("accuracy")) {
    const json& a = j["accuracy"];
    p.accuracy = Accuracy{static_cast<int>(positive(a, "jobs", "accuracy.")), non_negative_number(a, "median_error", "accuracy."),
                          non_negative_number(a, "worst_error", "accuracy."), text(a, "date", "accuracy."),
                          text(a, "how", "accuracy.")};
    if (p.accuracy->median_error < 0 || p.accuracy->worst_error < p.accuracy->median_error)
      bad("accuracy", "needs 0 <= median_error <= worst_error");
  }
  if (j.contains("doubts")) {
    const json& d = j["doubts"];
    if (!d.is_array()) bad("doubts", "must be a list of sentences");
    for (const json& line : d) {
      if (!line.is_string()) bad("doubts", "must be a list of sentences");
      p.doubts.push_back(line.get<std::string>());
    }
  }
  // Every table the layer description needs, for every element type measured.
  if (p.gemm.empty()) bad("gemm", "no table");
  for (const auto& [element, g] : p.gemm) {
    if (element == kFp8GemmElement) continue;  // a GEMM table alone
    if (p.attention.count(element) == 0) bad("attention." + element, "missing");
    for (const char* family : {"norm", "layernorm", "rope", "activation", "gelu", "routing", "embedding", "loss"})
      if (p.memory.count(std::string(family) + "/" + element) == 0)
        bad("memory." + std::string(family) + "/" + element, "missing (a profile from an older ptrain: measure it again)");
  }
  if (p.memory.count("optimizer/f32") == 0) bad("memory.optimizer/f32", "missing");
  return p;
}

std::string attention_mismatch(const MeasuredProfile& profile, kernels::CudnnAttentionMode mode) {
  using kernels::CudnnAttentionMode;
  if (!profile.cudnn_attention) return {};
  auto kernels_of = [](CudnnAttentionMode m) {
    switch (m) {
      case CudnnAttentionMode::Off: return "ptrain's own attention kernels";
      case CudnnAttentionMode::Deterministic: return "cuDNN's attention with its deterministic backward";
      default: return "cuDNN's attention";  // auto takes ours only where they are no slower
    }
  };
  const std::string timed = kernels_of(*profile.cudnn_attention), runs = kernels_of(mode);
  if (timed == runs) return {};
  return "the profile timed " + timed + " (PTRAIN_CUDNN_ATTENTION=" + kernels::to_string(*profile.cudnn_attention) +
         ") and this job would run " + runs + " (" + kernels::to_string(mode) +
         "): its attention time is the other kernels' (on an H100 ours took 1.3-3.5x cuDNN's time from "
         "seq 1024, cuDNN's deterministic backward 4.5% more of a Llama step)";
}

std::string expected_error(const MeasuredProfile* profile, bool cpu) {
  char text[512];
  if (profile == nullptr && cpu)
    return "no profile: CPU step times at peak x 60% (of a nominal 400 GFLOP/s a rank) are known to be off by up to "
           "23x: measured/predicted 1.53-5.42 over 13 jobs on a quiet 2-core CPU "
           "(bench/results/2026-11-27-step-time-vs-validate.json), 23 for configs/tiny-cpu.yaml on one loaded 6x "
           "over its 2 cores (bench/results/2026-12-07-demo-prediction.json); measure this machine with `ptrain profile --quick "
           "--nproc 2 --out profile.json` and give it as cluster.profile";
  if (profile == nullptr)
    return "peak x 60% is optimistic: measured/predicted 1.15-1.83 on an H100 (6 jobs) and 1.53-5.42 on a 2-core "
           "CPU (13 jobs; bench/results/2026-11-27-step-time-vs-validate*.json); give cluster.profile a `ptrain "
           "profile` of the machine";
  if (profile->transfer) {
    const Transfer& t = *profile->transfer;
    const std::string carried =
        "no run on " + t.to + " checked this profile, carried from " + t.from + " by datasheet ratios";
    if (t.from == "h100-sxm" && t.to == "a100-80g")
      return carried + "; the H100 profile of ptrain's own attention kernels, carried so, predicted Megatron-LM's 10 "
                       "published A100 runs (SC21 Table 1, configs/published) at 0.94-1.08 of their published "
                       "throughput";
    if (t.from == "h100-sxm" && t.to == "h200")
      return carried + "; the built-in H100 profile (2026-11-27), carried so, predicted 6 jobs measured on an "
                       "H200 at 0.99-1.15 of their steps (median 10%, worst 15%; "
                       "bench/results/2026-11-28-step-time-vs-validate-nvidia-h200.json)";
    return carried + "; no runs checked this transfer";
  }
  if (!profile->accuracy) return "this profile has not been checked against runs (bench/step_time_vs_validate.py)";
  const Accuracy& a = *profile->accuracy;
  std::snprintf(text, sizeof text, "median %.0f%%, worst %.0f%% over %d runs of %s (%s)", 100 * a.median_error,
                100 * a.worst_error, a.jobs, a.how.c_str(), a.date.c_str());
  return text;
}

}  // namespace ptrain::plan
