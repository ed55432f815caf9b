#include "app/validate_report.h"

#include "app/json_writer.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace ptrain::app {
namespace {

constexpr const char* kAxes[] = {"tp", "pp", "dp", "cp", "ep"};

std::string printf_string(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

std::string count_text(double n) {  // 124.44 M, 8.03 B
  if (n >= 1e12) return printf_string("%.2f T", n / 1e12);
  if (n >= 1e9) return printf_string("%.2f B", n / 1e9);
  if (n >= 1e6) return printf_string("%.2f M", n / 1e6);
  if (n >= 1e3) return printf_string("%.2f K", n / 1e3);
  return printf_string("%.0f", n);
}

std::string percent(double fraction) { return printf_string("%.1f%%", 100.0 * fraction); }
std::string ms(double seconds) { return printf_string("%.1f", seconds * 1e3) + " ms"; }

// ", at most 19 in flight", or why schedule.max_in_flight changed nothing; empty without one.
std::string in_flight_cap(const config::JobSpec& spec, const plan::Estimate& est) {
  if (spec.schedule.max_in_flight == 0) return "";
  if (est.max_in_flight > 0) return ", at most " + std::to_string(est.max_in_flight) + " in flight";
  return " (max_in_flight " + std::to_string(spec.schedule.max_in_flight) + " does not bind)";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string group_text(const grid::Group& g) {
  std::string s = "[";
  const size_t shown = std::min<size_t>(g.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? "," : "") + std::to_string(g[i]);
  if (shown < g.size()) s += ",... (" + std::to_string(g.size()) + ")";
  return s + "]";
}

// Tensor names with their layer and expert numbers replaced by '*', so a 126-layer model reads as
// one line per kind of tensor: "model.layers.*.mlp.up_proj.weight x126".
std::string name_pattern(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size();) {
    const bool starts_number = std::isdigit(static_cast<unsigned char>(name[i])) && (i == 0 || name[i - 1] == '.');
    if (starts_number) {
      size_t j = i;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      if (j == name.size() || name[j] == '.') {
        out += '*';
        i = j;
        continue;
      }
    }
    out += name[i++];
  }
  return out;
}

struct TensorKind {
  std::string pattern;
  std::vector<std::int64_t> global_shape, local_shape;
  std::int64_t count = 0;
  double elements = 0;
};

std::vector<TensorKind> tensor_kinds(const std::vector<plan::TensorCount>& tensors) {
  std::vector<TensorKind> kinds;
  std::map<std::string, size_t> index;
  for (const auto& t : tensors) {
    const std::string pattern = name_pattern(t.name);
    auto [it, inserted] = index.emplace(pattern, kinds.size());
    if (inserted) kinds.push_back({pattern, t.global_shape, t.local_shape, 0, 0});
    TensorKind& k = kinds[it->second];
    double n = 1;
    for (auto d : t.global_shape) n *= static_cast<double>(d);
    k.count += 1;
    k.elements += n;
  }
  return kinds;
}

}  // namespace

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  return printf_string(unit == 0 ? "%.0f" : "%.2f", bytes) + " " + units[unit];
}

std::string human_report(const config::JobSpec& spec, const plan::Estimate& est, bool engine_runs_it) {
  std::string out;
  auto line = [&out](const std::string& s) { out += s + "\n"; };
  const auto& d = est.degrees;
  const auto& m = spec.model;

  const char* verdict = !est.diags.ok() ? "  -> INVALID"
                        : engine_runs_it
                            ? "  -> valid, would run"
                            : "  -> valid; `ptrain run` does not execute this layout yet (see the warnings)";
  line("ptrain validate: " + spec.name + verdict);
  line("");
  line("Layout     world " + std::to_string(est.world) + " = tp " + std::to_string(d.tp) + " x pp " +
       std::to_string(d.pp) + " x dp " + std::to_string(d.dp) + " x cp " + std::to_string(d.cp) +
       (d.cp > 1 ? std::string(" (") + config::to_string(spec.parallel.cp_comm) + ")" : std::string()) + "  (ep " +
       std::to_string(d.ep) + " carved from tp*cp*dp), order " + spec.parallel.order + ", zero " +
       std::to_string(spec.parallel.zero) + (spec.parallel.sequence_parallel ? ", sequence parallel" : ""));
  for (const char* axis : kAxes) {
    auto it = est.groups.find(axis);
    if (it == est.groups.end() || it->second.empty()) continue;
    const auto& groups = it->second;
    auto comm = est.comm_bytes_per_step.find(axis);
    std::string tier;
    if (comm != est.comm_bytes_per_step.end() && comm->second.total() > 0)
      tier = comm->second.inter_node > 0 ? "  crosses nodes" : "  within a node";
    line(std::string("           ") + axis + ": " + std::to_string(groups.size()) + " groups of " +
         std::to_string(groups.front().size()) + ", first " + group_text(groups.front()) + tier);
  }
  line("");
  line("Model      " + std::string(config::to_string(m.arch)) + ", " + std::to_string(m.layers) + " layers, hidden " +
       std::to_string(m.hidden) + ", heads " + std::to_string(m.heads) + " (kv " + std::to_string(m.kv_heads) +
       "), ffn " + std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
       (m.padded_vocab != m.vocab ? " (padded to " + std::to_string(m.padded_vocab) + ")" : "") + ", seq " +
       std::to_string(m.seq_len) + (m.moe ? ", experts " + std::to_string(m.moe->experts) + " top-" +
                                                std::to_string(m.moe->top_k)
                                          : ""));
  line("           parameters " + count_text(static_cast<double>(est.params_total)) + " total, " +
       count_text(static_cast<double>(est.params_active)) + " active per token");
  for (const auto& k : tensor_kinds(est.tensors)) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "             %-52s %-18s x%-4lld %10s  (rank slice %s)", k.pattern.c_str(),
                  shape_text(k.global_shape).c_str(), static_cast<long long>(k.count), count_text(k.elements).c_str(),
                  shape_text(k.local_shape).c_str());
    line(buf);
  }
  line("");
  line("Pipeline   " + std::string(config::to_string(spec.schedule.kind)) + ", " + std::to_string(d.pp) +
       " stages x " + std::to_string(spec.schedule.virtual_stages) + " chunks, " + std::to_string(est.microbatches) +
       " microbatches of " + std::to_string(spec.train.micro_batch) + in_flight_cap(spec, est) + ": bubble " +
       percent(est.bubble_fraction) +
       (d.pp > 1 ? " = " + ms(est.breakdown.bubble_s) + " of the " + ms(est.pipeline_s) + " pipeline (pp rank " +
                       std::to_string(est.bubble_rank) + ", computing most)"
                 : std::string()) +
       ", peak in-flight " + printf_string("%.2f", est.peak_inflight) + " microbatches");
  // A rank idle for much longer than the bubble waits on heavier stages: the split's imbalance.
  const auto idlest = std::max_element(est.idle_fraction.begin(), est.idle_fraction.end());
  if (idlest != est.idle_fraction.end() && *idlest > est.bubble_fraction + 0.05)
    line("           pp rank " + std::to_string(idlest - est.idle_fraction.begin()) + " idles " + percent(*idlest) +
         " of it, waiting on heavier stages (schedule.layers_per_stage moves layers between them)");
  line("");
  const plan::MemoryLimit& limit = est.memory_limit;
  if (limit.host)  // CPU ranks: a node's share its host
    line("Memory     per rank (bytes on the host), a node's " + std::to_string(limit.ranks) + " ranks share its " +
         bytes_text(limit.bytes) +
         (spec.cluster.host_memory_gb > 0 ? " (cluster.host_memory_gb)" : " (the cpu profile's)") + ": together " +
         bytes_text(est.memory_limit_used_bytes));
  else
    line("Memory     per rank (bytes on the device), " + est.hardware + " has " + bytes_text(est.device_memory_bytes));
  line("           ranks          pp  tp     ep         params       grads   optimizer activations     buffers       total");
  // Positions with the same pp stage and the same numbers share one row (tp and ep ranges).
  for (size_t i = 0; i < est.ranks.size();) {
    size_t j = i + 1;
    auto same = [&](const plan::RankEstimate& a, const plan::RankEstimate& b) {
      return a.pp_rank == b.pp_rank && a.memory.total() == b.memory.total() && a.memory.params == b.memory.params &&
             a.memory.activations == b.memory.activations;
    };
    while (j < est.ranks.size() && same(est.ranks[i], est.ranks[j])) ++j;
    const auto& first = est.ranks[i];
    const auto& last = est.ranks[j - 1];
    auto range = [](int a, int b) { return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b); };
    const bool heaviest = est.max_memory_rank >= static_cast<int>(i) && est.max_memory_rank < static_cast<int>(j);
    const auto& mem = first.memory;
    char buf[320];
    std::snprintf(buf, sizeof buf, "         %c %-14s %3d %-6s %-6s %11s %11s %11s %11s %11s %11s", heaviest ? '*' : ' ',
                  (j - i == 1 ? std::to_string(first.rank) : std::to_string(first.rank) + ",...").c_str(), first.pp_rank,
                  range(first.tp_rank, last.tp_rank).c_str(), range(first.ep_rank, last.ep_rank).c_str(),
                  bytes_text(mem.params).c_str(), bytes_text(mem.grads).c_str(), bytes_text(mem.optimizer).c_str(),
                  bytes_text(mem.activations).c_str(), bytes_text(mem.comm_buffers).c_str(),
                  bytes_text(mem.total()).c_str());
    line(buf);
    i = j;
  }
  line("           (* = the rank with the most; activations = per in-flight microbatch x peak in-flight)");
  const double checkpoint_copy = est.heaviest().memory.checkpoint_copy;
  if (spec.parallel.offload == config::Offload::Optimizer || checkpoint_copy > 0)
    line("           host (" +
         std::string(spec.parallel.offload == config::Offload::Optimizer ? "offload: optimizer" : "") +
         (spec.parallel.offload == config::Offload::Optimizer && checkpoint_copy > 0 ? "; " : "") +
         (checkpoint_copy > 0 ? "checkpoint.async: the copy a save writes from, " + bytes_text(checkpoint_copy) +
                                    " per rank"
                              : std::string()) +
         "): " + bytes_text(est.host_memory_bytes) + " per rank, " +
         bytes_text(est.node_host_memory_bytes) + " per node" +
         (spec.cluster.host_memory_gb > 0 ? " of its " + bytes_text(spec.cluster.host_memory_gb * 1e9)
                                          : std::string(" (set cluster.host_memory_gb to check it against the node's RAM)")));
  line("");
  line("Compute    " + count_text(est.tokens_per_step) + " tokens/step, model FLOPs/step " +
       printf_string("%.3e", est.flops_per_step) + " (with recompute " +
       printf_string("%.3e", est.hardware_flops_per_step) + ")");
  line("Comm       bytes each rank sends per step:");
  for (const char* axis : kAxes) {
    auto it = est.comm_bytes_per_step.find(axis);
    if (it == est.comm_bytes_per_step.end() || it->second.total() <= 0) continue;
    line(std::string("             ") + axis + "  " + bytes_text(it->second.total()) + "  (intra-node " +
         bytes_text(it->second.intra_node) + ", inter-node " + bytes_text(it->second.inter_node) + ")");
  }
  line("");
  line("Estimate   step " + printf_string("%.3f", est.step_time_s) + " s, MFU " + percent(est.mfu) + ", " +
       count_text(est.tokens_per_step / std::max(est.step_time_s, 1e-12)) + " tokens/s");
  const plan::Estimate::StepBreakdown& b = est.breakdown;
  line("           compute (" + est.compute_model + "): GEMM " + ms(b.gemm_s) + ", attention " + ms(b.attention_s) +
       ", memory-bound " + ms(b.memory_bound_s));
  line("           exposed comm: tp " + ms(b.tp_s) + ", cp " + ms(b.cp_s) + ", ep " + ms(b.ep_s) +
       ", dp " + ms(b.dp_s) + "; bubble " + ms(b.bubble_s) + " (pp messages in it), optimizer " + ms(b.optimizer_s));
  line("           expected error of the step: " + est.expected_error);
  return out;
}

namespace {

void write_diagnostics(JsonWriter& w, const char* name, const std::vector<config::Diagnostic>& list) {
  w.key(name).begin_array();
  for (const auto& d : list) {
    w.begin_object();
    w.key("key").value(d.key).key("message").value(d.message).key("fix").value(d.fix);
    w.key("line").value(d.line).key("column").value(d.column).key("origin").value(d.origin);
    w.end_object();
  }
  w.end_array();
}

void write_memory(JsonWriter& w, const plan::MemoryBreakdown& m) {
  w.key("params_bytes").value(m.params).key("grads_bytes").value(m.grads);
  w.key("optimizer_bytes").value(m.optimizer).key("activations_bytes").value(m.activations);
  w.key("comm_buffers_bytes").value(m.comm_buffers).key("total_bytes").value(m.total());
  w.key("host_bytes").value(m.host);  // parallel.offload: optimizer (not in total_bytes: the device's)
  w.key("checkpoint_copy_bytes").value(m.checkpoint_copy);  // checkpoint.async: in the host's memory too
}

}  // namespace

std::string json_diagnostics(const config::Diagnostics& diags) {
  JsonWriter w;
  w.begin_object().key("valid").value(diags.ok());
  write_diagnostics(w, "errors", diags.errors);
  write_diagnostics(w, "warnings", diags.warnings);
  return w.end_object().str();
}

std::string json_report(const config::JobSpec& spec, const plan::Estimate& est) {
  JsonWriter w;
  const auto& d = est.degrees;
  w.begin_object();
  w.key("valid").value(est.diags.ok()).key("name").value(spec.name).key("world").value(est.world);
  w.key("degrees").begin_object();
  w.key("tp").value(d.tp).key("pp").value(d.pp).key("dp").value(d.dp).key("cp").value(d.cp).key("ep").value(d.ep);
  w.end_object();
  w.key("grid").begin_object();
  for (const char* axis : kAxes) {
    auto it = est.groups.find(axis);
    w.key(axis).value(it == est.groups.end() ? grid::GroupList{} : it->second);
  }
  w.end_object();
  w.key("params_total").value(est.params_total).key("params_active").value(est.params_active);
  const auto& heaviest = est.ranks.at(static_cast<size_t>(est.max_memory_rank));
  w.key("memory").begin_object().key("rank").value(heaviest.rank);
  write_memory(w, heaviest.memory);
  w.key("device_bytes").value(est.device_memory_bytes);
  w.key("limit_bytes").value(est.memory_limit.bytes).key("limit_ranks").value(est.memory_limit.ranks);
  w.key("limit_used_bytes").value(est.memory_limit_used_bytes);
  w.key("node_host_bytes").value(est.node_host_memory_bytes).end_object();
  w.key("memory_per_rank").begin_array();
  for (const auto& r : est.ranks) {
    w.begin_object();
    w.key("rank").value(r.rank).key("pp_rank").value(r.pp_rank).key("tp_rank").value(r.tp_rank);
    w.key("ep_rank").value(r.ep_rank).key("params").value(r.params).key("peak_inflight").value(r.peak_inflight);
    write_memory(w, r.memory);
    w.end_object();
  }
  w.end_array();
  w.key("pipeline").begin_object();
  w.key("kind").value(config::to_string(spec.schedule.kind)).key("virtual_stages").value(spec.schedule.virtual_stages);
  w.key("microbatches").value(est.microbatches).key("bubble_fraction").value(est.bubble_fraction);
  w.key("bubble_rank").value(est.bubble_rank).key("makespan_s").value(est.pipeline_s);
  w.key("peak_inflight").value(est.peak_inflight).key("max_in_flight").value(est.max_in_flight).end_object();
  w.key("tokens_per_step").value(est.tokens_per_step).key("flops_per_step").value(est.flops_per_step);
  w.key("hardware_flops_per_step").value(est.hardware_flops_per_step);
  w.key("comm_bytes_per_step").begin_object();
  for (const char* axis : kAxes) {
    auto it = est.comm_bytes_per_step.find(axis);
    w.key(axis).value(it == est.comm_bytes_per_step.end() ? 0.0 : it->second.total());
  }
  w.end_object();
  w.key("comm_tiers").begin_object();
  for (const char* axis : kAxes) {
    auto it = est.comm_bytes_per_step.find(axis);
    const plan::CommVolume v = it == est.comm_bytes_per_step.end() ? plan::CommVolume{} : it->second;
    w.key(axis).begin_object().key("intra_node").value(v.intra_node).key("inter_node").value(v.inter_node).end_object();
  }
  w.end_object();
  w.key("step_time_s").value(est.step_time_s).key("mfu").value(est.mfu).key("hardware").value(est.hardware);
  const plan::Estimate::StepBreakdown& b = est.breakdown;
  w.key("compute_model").value(est.compute_model).key("expected_error").value(est.expected_error);
  w.key("step_breakdown").begin_object();
  w.key("gemm_s").value(b.gemm_s).key("attention_s").value(b.attention_s).key("memory_bound_s").value(b.memory_bound_s);
  w.key("comm_exposed_s").begin_object();
  w.key("tp").value(b.tp_s).key("cp").value(b.cp_s).key("ep").value(b.ep_s).key("dp").value(b.dp_s);
  w.end_object();
  w.key("bubble_s").value(b.bubble_s).key("optimizer_s").value(b.optimizer_s);
  w.end_object();
  write_diagnostics(w, "errors", est.diags.errors);
  write_diagnostics(w, "warnings", est.diags.warnings);
  return w.end_object().str();
}

}  // namespace ptrain::app
