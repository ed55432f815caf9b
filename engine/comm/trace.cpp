#include "engine/comm/trace.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <utility>

#include "engine/comm/comm.h"
#include "engine/io/replace_file.h"
#include "engine/log/log.h"
#include "kernels/ops.h"

namespace ptrain::dist {
namespace {

void append_escaped(std::string& out, const std::string& text) {
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned char>(c));
      out += code;
    } else {
      out += c;
    }
  }
}

std::string metadata(const char* what, int pid, int tid, const std::string& name) {
  std::string out = "{\"name\": \"" + std::string(what) + "\", \"ph\": \"M\", \"pid\": " + std::to_string(pid);
  if (tid >= 0) out += ", \"tid\": " + std::to_string(tid);
  out += ", \"args\": {\"name\": \"";
  append_escaped(out, name);
  return out + "\"}}";
}

// "" once `path` holds `text` whole (io::replace_file), else why not, naming the file and the cause.
std::string write_file(const std::string& path, const std::string& text) {
  const std::optional<io::WriteFailure> failure = io::replace_file(path, text);
  return failure ? "logging.trace: cannot write '" + path + "': " + failure->describe() : "";
}

std::string document(const std::string& events) {
  return "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n" + events + "\n]}\n";
}

}  // namespace

Trace::Trace(int rank, std::string label, std::size_t capacity)
    : rank_(rank), label_(std::move(label)), capacity_(capacity), start_(Clock::now()) {
  events_.reserve(std::min<std::size_t>(capacity_, 4096));
}

Trace::~Trace() {
  if (device_ == nullptr) return;
  for (const DeviceSpan& s : pending_) {
    device_->release_marker(s.from);
    device_->release_marker(s.to);
  }
  device_->release_marker(anchor_);
}

void Trace::start(Comm& comm) {
  double nothing = 0;
  comm.all_reduce(comm.world_group(), &nothing, 1);
  start_ = Clock::now();
}

double Trace::since_start_us(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - start_).count();
}

void Trace::add(const std::string& name, const char* category, Track track, Clock::time_point begin,
                Clock::time_point end, const std::string& args) {
  const double b = since_start_us(begin);
  push({name, category, track, b, since_start_us(end) - b, args});
}

void Trace::push(Event event) {
  if (events_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

void Trace::attach_device(const kernels::Ops& ops) {
  const std::uint64_t marker = ops.record_marker();
  if (marker == 0) return;
  ops.release_marker(marker);
  device_ = &ops;
  pin_device_clock();
}

std::uint64_t Trace::mark(const void* stream) const {
  return device_ == nullptr ? 0 : device_->record_marker(stream);
}

void Trace::add_device(std::string name, const char* category, std::uint64_t from, std::uint64_t to,
                       std::string args, int track) {
  if (from == 0 || to == 0) {  // no timeline (or a marker short): nothing to show, nothing kept
    if (device_ != nullptr) {
      device_->release_marker(from);
      device_->release_marker(to);
    }
    return;
  }
  pending_.push_back({std::move(name), category, from, to, std::move(args), track});
}

void Trace::resolve_device() {
  if (pending_.empty()) return;
  // Device seconds are counted from the anchor, pinned again at the end of each call: the events'
  // float milliseconds stay short intervals, precise to a microsecond, and the device's clock, which
  // drifts from the host's by parts per million, is never followed for longer than a step.
  for (const DeviceSpan& s : pending_) {
    const double begin_us = anchor_us_ + device_->marker_seconds(anchor_, s.from) * 1e6;
    push({s.name, s.category, s.track, begin_us, device_->marker_seconds(s.from, s.to) * 1e6, s.args});
    device_tracks_.insert(s.track);
    device_->release_marker(s.from);
    device_->release_marker(s.to);
  }
  pending_.clear();
  device_->release_marker(anchor_);
  pin_device_clock();
}

void Trace::pin_device_clock() {
  anchor_ = device_->record_marker();
  device_->marker_seconds(anchor_, anchor_);  // waits until the device has passed it
  anchor_us_ = since_start_us(Clock::now());
}

Trace::Scope::Scope(Trace* trace, std::string name, const char* category, Track track, std::string args)
    : trace_(trace), name_(std::move(name)), category_(category), track_(track), args_(std::move(args)),
      begin_(trace != nullptr ? Clock::now() : Clock::time_point{}) {}

Trace::Scope::~Scope() {
  if (trace_ != nullptr) trace_->add(name_, category_, track_, begin_, Clock::now(), args_);
}

std::string Trace::events_json() const {
  std::string out = metadata("process_name", rank_, -1, label_);
  out += ",\n" + metadata("process_sort_index", rank_, -1, std::to_string(rank_));
  out += ",\n" + metadata("thread_name", rank_, kSteps, "step, pipeline, optimizer");
  out += ",\n" + metadata("thread_name", rank_, kCollectives, "collectives");
  std::set<int> named = device_tracks_;
  if (device_ != nullptr) named.insert(kDevice);
  for (const int track : named) {
    const std::string name = track == kDevice        ? "device (compute stream)"
                             : track == kCommStream  ? "device (NCCL stream: collectives, receives)"
                             : track == kCopyStream  ? "device (offload copy stream)"
                                                     : "device (pipeline send stream " + std::to_string(track - kSendStreams) + ")";
    out += ",\n" + metadata("thread_name", rank_, track, name);
  }
  char number[64];
  for (const Event& e : events_) {
    out += ",\n{\"name\": \"";
    append_escaped(out, e.name);
    out += "\", \"cat\": \"";
    append_escaped(out, e.category);
    std::snprintf(number, sizeof number, "\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f", e.begin_us, e.duration_us);
    out += number;
    out += ", \"pid\": " + std::to_string(rank_) + ", \"tid\": " + std::to_string(static_cast<int>(e.track));
    if (!e.args.empty()) out += ", \"args\": {" + e.args + "}";
    out += "}";
  }
  if (dropped_ > 0)
    out += ",\n{\"name\": \"trace full: " + std::to_string(dropped_) + " later spans dropped\", \"ph\": \"i\", \"s\": \"p\", " +
           "\"ts\": " + std::to_string(events_.empty() ? 0.0 : events_.back().begin_us) + ", \"pid\": " +
           std::to_string(rank_) + ", \"tid\": 0}";
  return out;
}

bool Trace::write_merged(Comm& comm, const std::string& path) {
  const std::vector<std::string> all = comm.gather_strings(comm.world_group(), events_json(), 0);
  std::string failure;
  if (comm.rank() == 0) {
    std::string events;
    for (const std::string& rank : all) events += (events.empty() ? "" : ",\n") + rank;
    failure = write_file(path, document(events));
  }
  comm.broadcast_string(comm.world_group(), failure, 0);  // every rank fails with it: the run's exit is 1
  if (failure.empty()) return true;
  merged_write_failed_ = true;
  throw std::runtime_error(failure + (comm.rank() == 0 ? "" : " (on rank 0)"));
}

bool Trace::write_own(const std::string& path) const {
  if (merged_write_failed_) return false;  // beside the file that could not be written: said already
  const std::string failure = write_file(path, document(events_json()));
  if (!failure.empty()) log::comm().error(failure);
  return failure.empty();
}

std::string rank_trace_path(const std::string& path, int rank) {
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const std::string stem = has_extension ? path.substr(0, dot) : path;
  return stem + ".rank" + std::to_string(rank) + (has_extension ? path.substr(dot) : ".json");
}

}  // namespace ptrain::dist
