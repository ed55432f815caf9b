// dist::Trace: spans become Chrome trace events (valid JSON, ranks as processes, tracks as
// threads), the capacity drops later spans and says so, and the merged file of a one-rank world.
#include "engine/comm/trace.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/comm/comm.h"
#include "kernels/ops.h"
#include "tests/pretend_device_ops.h"
#include "tests/temp_dir.h"

namespace {

using ptrain::dist::Trace;
using Clock = Trace::Clock;

nlohmann::json parse_events(const std::string& events) { return nlohmann::json::parse("[" + events + "]"); }

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("trace spans are Chrome trace events of the rank's process and the span's track") {
  Trace trace(3, "rank 3 (pp 1)");
  const auto t0 = Clock::now();
  trace.add("F mb0 c1", "forward", Trace::kSteps, t0, t0 + std::chrono::microseconds(250), "\"microbatch\": 0");
  trace.add("all_reduce", "collective", Trace::kCollectives, t0 + std::chrono::microseconds(300),
            t0 + std::chrono::microseconds(400), "\"group\": \"dp[1,3]\", \"bytes\": 64");
  { const Trace::Scope scope(&trace, "weird \"name\"\n", "step"); }
  { const Trace::Scope nothing(nullptr, "never recorded", "step"); }
  REQUIRE(trace.recorded() == 3);

  const nlohmann::json events = parse_events(trace.events_json());
  int metadata = 0;
  std::vector<nlohmann::json> spans;
  for (const auto& e : events) {
    CHECK(e["pid"] == 3);
    if (e["ph"] == "M") ++metadata;
    if (e["ph"] == "X") spans.push_back(e);
  }
  CHECK(metadata == 4);  // process name and sort index, two thread names
  REQUIRE(spans.size() == 3);
  CHECK(spans[0]["name"] == "F mb0 c1");
  CHECK(spans[0]["cat"] == "forward");
  CHECK(spans[0]["tid"] == 0);
  CHECK(spans[0]["dur"].get<double>() == 250.0);
  CHECK(spans[0]["args"]["microbatch"] == 0);
  CHECK(spans[1]["tid"] == 1);
  CHECK(spans[1]["args"]["group"] == "dp[1,3]");
  // ts are microseconds with a fractional part: their difference is 300 to the doubles' rounding
  CHECK(spans[1]["ts"].get<double>() - spans[0]["ts"].get<double>() == Approx(300.0).margin(1e-6));
  CHECK(spans[2]["name"] == "weird \"name\"\n");
}

TEST_CASE("device spans land on their own track at the device's times, and their markers go back") {
  const ptrain::test::PretendDeviceOps device;  // markers on the host's clock
  {
    Trace trace(0, "rank 0");
    CHECK(trace.mark() == 0);  // no device timeline yet
    trace.attach_device(device);
    const auto spin = [](int us) {
      const auto until = Clock::now() + std::chrono::microseconds(us);
      while (Clock::now() < until) {
      }
    };
    for (int step = 0; step < 3; ++step) {
      const std::uint64_t f0 = trace.mark();
      spin(2000);
      const std::uint64_t f1 = trace.mark();
      spin(1000);
      const std::uint64_t b0 = trace.mark();
      spin(3000);
      trace.add_device("F mb0 c0", "forward", f0, f1, "\"microbatch\": 0");
      trace.add_device("B mb0 c0", "backward", b0, trace.mark());
      trace.resolve_device();
      CHECK(device.live_markers() == 1);  // the anchor the next step's spans are timed from
    }
    trace.add_device("never", "step", 0, trace.mark());  // no `from` marker: not a span
    const nlohmann::json events = parse_events(trace.events_json());
    std::vector<nlohmann::json> spans;
    bool named = false;
    for (const auto& e : events) {
      if (e["ph"] == "X") spans.push_back(e);
      if (e["ph"] == "M" && e.contains("tid") && e["tid"] == Trace::kDevice) named = true;
    }
    CHECK(named);
    REQUIRE(spans.size() == 6);
    for (std::size_t i = 0; i < spans.size(); ++i) {
      INFO("span " << i);
      CHECK(spans[i]["tid"] == Trace::kDevice);
      CHECK(spans[i]["dur"].get<double>() >= (i % 2 == 0 ? 2000.0 : 3000.0));  // no upper bound: a loaded
                                                                                  // machine may preempt the spin
      // In order. A step's spans are placed from the anchor pinned after the previous step, whose
      // host time is read right after the device passed it: a read the host delays (an interrupt,
      // a preemption on a loaded machine) places that step's spans later by the delay. Within a step
      // the order is exact (one anchor); across steps it holds to that delay (17 us seen in CI).
      const double slack = i % 2 == 0 ? 1000.0 : 0.0;
      if (i > 0)
        CHECK(spans[i]["ts"].get<double>() + slack >=
              spans[i - 1]["ts"].get<double>() + spans[i - 1]["dur"].get<double>());
    }
    CHECK(spans[1]["ts"].get<double>() - spans[0]["ts"].get<double>() - spans[0]["dur"].get<double>() >= 1000.0);
  }
  CHECK(device.live_markers() == 0);  // the trace gave back its anchor and its unresolved markers
}

namespace {

// A backend of two ranks without transport whose collectives "run" on a stream of the device, as
// NCCL's do: a marker before and after, shown through Comm::trace_device.
class StreamComm final : public ptrain::dist::Comm {
 public:
  StreamComm() : Comm(0, 2) {}
  const char* backend() const override { return "stream"; }

 protected:
  void connect(const ptrain::dist::Group&) override {}
  void do_all_reduce(const ptrain::dist::Group&, void*, std::size_t, ptrain::dist::ElemType, ptrain::dist::ReduceOp,
                     bool) override {
    const std::uint64_t from = trace_mark(&stream_);
    trace_device(from, trace_mark(&stream_), Trace::kCommStream);
  }
  [[noreturn]] static void none() { throw ptrain::dist::DistError("not used"); }
  void do_reduce_scatter(const ptrain::dist::Group&, void*, std::size_t, ptrain::dist::ElemType, bool) override { none(); }
  void do_all_gather(const ptrain::dist::Group&, void*, std::size_t, ptrain::dist::ElemType, bool) override { none(); }
  void do_all_to_allv(const ptrain::dist::Group&, const float*, const std::vector<std::size_t>&, float*,
                      const std::vector<std::size_t>&) override {
    none();
  }
  void do_broadcast(const ptrain::dist::Group&, void*, std::size_t, int) override { none(); }
  void do_send(const ptrain::dist::Group&, const void*, std::size_t, int, int) override { none(); }
  void do_recv(const ptrain::dist::Group&, void*, std::size_t, int, int) override { none(); }
  void do_barrier(const ptrain::dist::Group&) override { none(); }

 private:
  int stream_ = 0;  // stands for a cudaStream_t
};

}  // namespace

TEST_CASE("spans of the device's other streams land on tracks of their own, named once they have one") {
  const ptrain::test::PretendDeviceOps device;
  {
    StreamComm comm;
    Trace trace(0, "rank 0");
    trace.attach_device(device);
    comm.set_trace(&trace);
    std::vector<float> data(8);
    comm.all_reduce(comm.world_group(), data.data(), data.size());  // kCommStream, through the Comm
    const std::uint64_t c0 = trace.mark();
    trace.add_device("upload unit 2", "offload", trace.mark(), trace.mark(), "\"bytes\": 64", Trace::kCopyStream);
    trace.add_device("F mb0 c0", "forward", c0, trace.mark());
    trace.add_device("isend", "collective", trace.mark(), trace.mark(), "", Trace::send_stream_track(1));
    trace.resolve_device();
    comm.set_trace(nullptr);

    const nlohmann::json events = parse_events(trace.events_json());
    std::map<int, std::string> named;
    std::map<int, nlohmann::json> spans;
    for (const auto& e : events) {
      if (e["ph"] == "M" && e["name"] == "thread_name") named[e["tid"].get<int>()] = e["args"]["name"];
      if (e["ph"] == "X" && e["tid"].get<int>() >= Trace::kDevice) spans[e["tid"].get<int>()] = e;
    }
    CHECK(named.count(Trace::kDevice) == 1);
    CHECK(named.count(Trace::kCommStream) == 1);
    CHECK(named.count(Trace::kCopyStream) == 1);
    CHECK(named.count(Trace::send_stream_track(0)) == 0);  // no span there: no track
    REQUIRE(spans.count(Trace::kCommStream) == 1);
    CHECK(spans[Trace::kCommStream]["name"] == "all_reduce");
    CHECK(spans[Trace::kCommStream]["args"]["group"] == comm.world_group().name);
    CHECK(spans[Trace::kCommStream]["args"]["bytes"] == 32);
    REQUIRE(spans.count(Trace::kCopyStream) == 1);
    CHECK(spans[Trace::kCopyStream]["args"]["bytes"] == 64);
    CHECK(spans.count(Trace::kDevice) == 1);
    CHECK(named[Trace::send_stream_track(1)] == "device (pipeline send stream 1)");
  }
  CHECK(device.live_markers() == 0);
}

TEST_CASE("on the CPU a trace has no device track") {
  Trace trace(0, "rank 0");
  trace.attach_device(ptrain::kernels::cpu_ops());
  CHECK(trace.mark() == 0);
  CHECK(trace.events_json().find("device") == std::string::npos);
}

TEST_CASE("a full trace drops later spans and says how many") {
  Trace trace(0, "rank 0", 2);
  const auto t = Clock::now();
  for (int i = 0; i < 5; ++i) trace.add("F", "forward", Trace::kSteps, t, t);
  CHECK(trace.recorded() == 2);
  CHECK(trace.dropped() == 3);
  const nlohmann::json events = parse_events(trace.events_json());
  CHECK(events.back()["name"] == "trace full: 3 later spans dropped");
}

TEST_CASE("a one-rank world's merged trace is a Chrome trace document") {
  const auto comm = ptrain::dist::make_solo_comm();
  Trace trace(0, "rank 0");
  trace.start(*comm);
  comm->set_trace(&trace);
  double x = 1;
  comm->all_reduce(comm->world_group(), &x, 1);  // a one-rank group moves nothing: no span
  comm->set_trace(nullptr);
  CHECK(trace.recorded() == 0);
  const auto t = Clock::now();
  trace.add("step 1", "step", Trace::kSteps, t, t + std::chrono::milliseconds(2));
  const ptrain::test::TempDir dir("ptrain-trace-test");
  const std::string path = dir / "trace.json";
  REQUIRE(trace.write_merged(*comm, path));
  const nlohmann::json doc = nlohmann::json::parse(read(path));
  CHECK(doc["displayTimeUnit"] == "ms");
  bool step = false;
  for (const auto& e : doc["traceEvents"]) step |= e["name"] == "step 1" && e["dur"].get<double>() == 2000.0;
  CHECK(step);
}

TEST_CASE("a failed rank's own trace sits beside the job's") {
  using ptrain::dist::rank_trace_path;
  CHECK(rank_trace_path("runs/x/trace.json", 3) == "runs/x/trace.rank3.json");
  CHECK(rank_trace_path("runs/x.y/trace", 0) == "runs/x.y/trace.rank0.json");
  CHECK(rank_trace_path("trace", 12) == "trace.rank12.json");
}
