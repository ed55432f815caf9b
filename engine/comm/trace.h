// The timeline of a run for `logging.trace`: each rank records spans (what ran, on which track,
// from when to when) into memory as it trains, and at the end rank 0 gathers every rank's spans and
// writes one Chrome trace (JSON, open in Perfetto or chrome://tracing): one process per rank, one
// thread per track. The names follow `ptrain schedule --trace` ("F mb3 c0"), so the real pipeline
// opens beside the simulated one.
//
// Clocks: every rank starts its clock when it leaves the same barrier (start()), so spans of ranks
// on different hosts line up to within that barrier's skew. Cost: two clock reads and one append a
// span; at `capacity` spans a rank stops recording and the file says how many it dropped. On the
// CUDA backend the spans of the first two tracks are host times: when the host issued the work, and
// where it waited; the device tracks show the streams as the GPU ran them (spans between markers,
// kernels::Ops::record_marker), placed on the host's clock: the compute stream (F/B/W, the
// optimizer), NCCL's stream (collectives and the pipeline's receives), the pipeline's send streams,
// and the optimizer offload's copy stream. A device track is named in the file once it has a span.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace ptrain::kernels {
class Ops;
}

namespace ptrain::dist {

class Comm;

class Trace {
 public:
  using Clock = std::chrono::steady_clock;
  // Tracks of a rank (Chrome "threads").
  // Tracks of a rank (Chrome "threads"): the host's two, then the device's streams. Each of the
  // pipeline's send streams has a track of its own (sends on two channels overlap), from
  // send_stream_track(0) up.
  enum Track : int { kSteps = 0, kCollectives = 1, kDevice = 2, kCommStream = 3, kCopyStream = 4, kSendStreams = 5 };
  static int send_stream_track(int n) { return kSendStreams + n; }

  Trace(int rank, std::string label, std::size_t capacity = 1'000'000);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // Ends a barrier over every rank of `comm` and starts the clock (every rank calls it).
  void start(Comm& comm);

  // A span on `track` from `begin` to `end`; `args` is the body of a JSON object ("\"bytes\": 4"),
  // or empty. `name` and `category` are escaped.
  void add(const std::string& name, const char* category, Track track, Clock::time_point begin,
           Clock::time_point end, const std::string& args = {});

  // A span from construction to destruction.
  class Scope {
   public:
    Scope(Trace* trace, std::string name, const char* category, Track track = kSteps, std::string args = {});
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Trace* trace_;
    std::string name_;
    const char* category_;
    Track track_;
    std::string args_;
    Clock::time_point begin_;
  };

  // The device's timeline, where the backend has one of its own (CUDA; not the CPU, which runs each
  // op on the calling thread). attach_device after start(): waits for the device once, to pin its
  // clock to the host's. mark(stream): a marker on a stream of the device (kernels::Ops::
  // record_marker; nullptr the compute stream), 0 without a device timeline. add_device: a span
  // between two markers on device track `track` (kDevice and after), kept until resolve_device(),
  // which the trainer calls where the host waits for the device anyway (a step's end, every
  // stream's work of the step done); it places the spans at the anchor's host time plus the
  // device's seconds since it, gives their markers back, and pins a new anchor: one marker on the
  // idle compute stream, waited for (a launch's cost, no wait for work).
  void attach_device(const kernels::Ops& ops);
  bool has_device() const { return device_ != nullptr; }
  std::uint64_t mark(const void* stream = nullptr) const;
  void add_device(std::string name, const char* category, std::uint64_t from, std::uint64_t to, std::string args = {},
                  int track = kDevice);
  void resolve_device();

  std::size_t recorded() const { return events_.size(); }
  std::size_t dropped() const { return dropped_; }

  // This rank's events as Chrome trace events (comma-separated, no brackets): process and thread
  // names first, then the spans in the order recorded.
  std::string events_json() const;

  // Collective over `comm`'s world: every rank sends its events to rank 0, which writes `path` as one
  // Chrome trace, whole or not at all (io::replace_file: a trace that was there stays as it was).
  // True once written; where rank 0 could not write it, every rank throws std::runtime_error
  // naming the file and the cause (a runtime failure: the run's exit is 1).
  bool write_merged(Comm& comm, const std::string& path);
  // Only this rank's events, to `path` (a run that failed: no collective is safe then); false after
  // saying on stderr why it could not be written. False at once after a failed write_merged: its
  // own file would go beside the one that could not be written, and the failure is said.
  bool write_own(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    const char* category;
    int track;
    double begin_us;
    double duration_us;
    std::string args;
  };
  struct DeviceSpan {
    std::string name;
    const char* category;
    std::uint64_t from, to;  // markers
    std::string args;
    int track;
  };
  double since_start_us(Clock::time_point t) const;
  // A marker on the compute stream, waited for: the anchor device times are placed from.
  void pin_device_clock();
  void push(Event event);

  int rank_;
  std::string label_;
  std::size_t capacity_;
  Clock::time_point start_;
  std::vector<Event> events_;
  std::size_t dropped_ = 0;
  const kernels::Ops* device_ = nullptr;  // attach_device's
  std::uint64_t anchor_ = 0;              // a marker the device passed at host time anchor_us_
  double anchor_us_ = 0;
  std::vector<DeviceSpan> pending_;
  std::set<int> device_tracks_;  // with a span: named in the file
  bool merged_write_failed_ = false;
};

// The file a failed rank writes its own events to: "run/trace.json" -> "run/trace.rank3.json".
std::string rank_trace_path(const std::string& path, int rank);

}  // namespace ptrain::dist
