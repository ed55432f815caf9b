// The Gloo Comm with real TCP connections: one thread per rank in this process, a store hosted by
// "rank 0", every collective checked against the arithmetic done by hand.
#include "engine/comm/comm.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <numeric>
#include <sstream>
#include <thread>

#include "engine/comm/gloo_comm.h"
#include "engine/comm/parallel_groups.h"
#include "engine/rendezvous/store.h"
#include "kernels/bf16.h"
#include "tests/gloo_ranks.h"
#include "tests/load_job.h"

namespace {

using namespace ptrain::dist;
using namespace std::chrono_literals;
using ptrain::test::run_gloo_ranks;

float value(int rank, std::size_t i) { return static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i) * 0.25f; }

using ptrain::kernels::bf16_to_f32;
using ptrain::kernels::f32_to_bf16;

// Small multiples of 1/4: every partial sum of up to three ranks is exact in bf16 (8 significant
// bits), so the expected values do not depend on the order the algorithm adds in.
float small_value(int rank, std::size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 20) * 0.25f; }

std::vector<std::uint16_t> bf16_values(int rank, std::size_t n) {
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(small_value(rank, i));
  return v;
}

// Whether some line of the collective log names `op` with `bytes` bytes.
bool logged(const Comm& comm, const std::string& op, std::size_t bytes) {
  std::istringstream lines(comm.log().dump());
  const std::string size = " " + std::to_string(bytes) + " bytes";
  for (std::string line; std::getline(lines, line);)
    if (line.find(" " + op + " ") != std::string::npos && line.find(size) != std::string::npos) return true;
  return false;
}

// A backend without transport that records the groups it is asked to connect.
class RecordingComm final : public Comm {
 public:
  RecordingComm(int rank, int world) : Comm(rank, world) {}
  const char* backend() const override { return "recording"; }
  std::vector<std::pair<std::string, bool>> connected;  // group name, member?

 protected:
  void connect(const Group& g) override { connected.emplace_back(g.name, g.has_me()); }
  [[noreturn]] static void none() { throw DistError("no communication expected"); }
  void do_all_reduce(const Group&, void*, std::size_t, ElemType, ReduceOp, bool) override { none(); }
  void do_reduce_scatter(const Group&, void*, std::size_t, ElemType, bool) override { none(); }
  void do_all_gather(const Group&, void*, std::size_t, ElemType, bool) override { none(); }
  void do_all_to_allv(const Group&, const float*, const std::vector<std::size_t>&, float*,
                      const std::vector<std::size_t>&) override {
    none();
  }
  void do_broadcast(const Group&, void*, std::size_t, int) override { none(); }
  void do_send(const Group&, const void*, std::size_t, int, int) override { none(); }
  void do_recv(const Group&, void*, std::size_t, int, int) override { none(); }
  void do_barrier(const Group&) override { none(); }
};

}  // namespace

TEST_CASE("all_reduce sums and maxes floats, doubles and integers over the world") {
  run_gloo_ranks(3, [](Comm& comm) {
    std::vector<float> f(1000);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = value(comm.rank(), i);
    comm.all_reduce(comm.world_group(), f.data(), f.size());
    for (std::size_t i = 0; i < f.size(); ++i) REQUIRE(f[i] == value(0, i) + value(1, i) + value(2, i));
    double d[2] = {static_cast<double>(comm.rank()), 1.5};
    comm.all_reduce(comm.world_group(), d, 2, ReduceOp::Max);
    REQUIRE(d[0] == 2.0);
    REQUIRE(d[1] == 1.5);
    std::int64_t n = comm.rank() + 1;
    comm.all_reduce(comm.world_group(), &n, 1);
    REQUIRE(n == 6);
  });
}

TEST_CASE("all_reduce: any count over any world, fewer elements than ranks included, every rank the same bytes") {
  for (int world : {2, 3, 4}) {
    run_gloo_ranks(world, [world](Comm& comm) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{1001}}) {
        std::vector<float> sum(count), max(count), min(count);
        for (std::size_t i = 0; i < count; ++i) sum[i] = max[i] = min[i] = value(comm.rank(), i);
        comm.all_reduce(comm.world_group(), sum.data(), count);
        comm.all_reduce(comm.world_group(), max.data(), count, ReduceOp::Max);
        comm.all_reduce(comm.world_group(), min.data(), count, ReduceOp::Min);
        for (std::size_t i = 0; i < count; ++i) {
          float want = 0, high = value(0, i), low = value(0, i);
          for (int r = 0; r < world; ++r) {
            want += value(r, i);
            high = std::max(high, value(r, i));
            low = std::min(low, value(r, i));
          }
          REQUIRE(sum[i] == Approx(want).epsilon(1e-6));
          REQUIRE(max[i] == high);
          REQUIRE(min[i] == low);
        }
        std::vector<float> highest = sum, lowest = sum;  // ranks agree when their max equals their min
        comm.all_reduce(comm.world_group(), highest.data(), count, ReduceOp::Max);
        comm.all_reduce(comm.world_group(), lowest.data(), count, ReduceOp::Min);
        REQUIRE(highest == lowest);
      }
    });
  }
}

TEST_CASE("reduce_scatter and all_gather work in place, chunk i on rank i") {
  for (int world : {2, 3, 4}) {
    run_gloo_ranks(world, [world](Comm& comm) {
      const std::size_t chunk = 37;  // odd on purpose
      const auto n = chunk * static_cast<std::size_t>(world);
      std::vector<float> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = value(comm.rank(), i);
      comm.reduce_scatter(comm.world_group(), data.data(), chunk);
      const std::size_t mine = static_cast<std::size_t>(comm.rank()) * chunk;
      for (std::size_t i = mine; i < mine + chunk; ++i) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += value(r, i);
        REQUIRE(data[i] == Approx(want).epsilon(1e-6));
      }
      std::vector<float> gathered(n, -1.0f);
      for (std::size_t i = mine; i < mine + chunk; ++i) gathered[i] = static_cast<float>(i) + 0.5f;
      comm.all_gather(comm.world_group(), gathered.data(), chunk);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(gathered[i] == static_cast<float>(i) + 0.5f);
    });
  }
}

TEST_CASE("bf16 all_reduce adds in fp32 and rounds to nearest even once per step") {
  run_gloo_ranks(3, [](Comm& comm) {
    const std::size_t n = 1000;
    std::vector<std::uint16_t> sum = bf16_values(comm.rank(), n), max = sum, min = sum;
    comm.all_reduce(comm.world_group(), sum.data(), n, ElemType::BF16);
    comm.all_reduce(comm.world_group(), max.data(), n, ElemType::BF16, ReduceOp::Max);
    comm.all_reduce(comm.world_group(), min.data(), n, ElemType::BF16, ReduceOp::Min);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(bf16_to_f32(sum[i]) == small_value(0, i) + small_value(1, i) + small_value(2, i));
      REQUIRE(bf16_to_f32(max[i]) == small_value(2, i));
      REQUIRE(bf16_to_f32(min[i]) == small_value(0, i));
    }
    CHECK(logged(comm, "all_reduce", 2000));
  });
  // Two ranks add once: 256 + 1 and 256 + 3 lie halfway between bf16 neighbours (spacing 2 at
  // 256) and round to the even mantissa, 256 and 260; 256 + 2 is exact.
  run_gloo_ranks(2, [](Comm& comm) {
    const float mine[3] = {256.0f, 256.0f, 256.0f}, other[3] = {1.0f, 3.0f, 2.0f};
    std::uint16_t x[3];
    for (int k = 0; k < 3; ++k) x[k] = f32_to_bf16(comm.rank() == 0 ? mine[k] : other[k]);
    comm.all_reduce(comm.world_group(), x, 3, ElemType::BF16);
    CHECK(bf16_to_f32(x[0]) == 256.0f);
    CHECK(bf16_to_f32(x[1]) == 260.0f);
    CHECK(bf16_to_f32(x[2]) == 258.0f);
  });
}

TEST_CASE("reduce_scatter and all_gather take every element type") {
  run_gloo_ranks(3, [](Comm& comm) {
    const std::size_t chunk = 37, n = 3 * chunk;
    const std::size_t mine = static_cast<std::size_t>(comm.rank()) * chunk;
    std::vector<std::uint16_t> bf = bf16_values(comm.rank(), n);
    comm.reduce_scatter(comm.world_group(), bf.data(), chunk, ElemType::BF16);
    std::vector<double> f64(n);
    std::vector<std::int64_t> i64(n);
    for (std::size_t i = 0; i < n; ++i) {
      f64[i] = 0.1 * static_cast<double>(i + 1) * (comm.rank() + 1);
      i64[i] = (std::int64_t{1} << 40) * (comm.rank() + 1) + static_cast<std::int64_t>(i);
    }
    comm.reduce_scatter(comm.world_group(), f64.data(), chunk, ElemType::F64);
    comm.reduce_scatter(comm.world_group(), i64.data(), chunk, ElemType::I64);
    for (std::size_t i = mine; i < mine + chunk; ++i) {
      REQUIRE(bf16_to_f32(bf[i]) == small_value(0, i) + small_value(1, i) + small_value(2, i));
      REQUIRE(f64[i] == Approx(0.6 * static_cast<double>(i + 1)).epsilon(1e-14));
      REQUIRE(i64[i] == 6 * (std::int64_t{1} << 40) + 3 * static_cast<std::int64_t>(i));
    }
    CHECK(logged(comm, "reduce_scatter", 3 * chunk * 2));
    CHECK(logged(comm, "reduce_scatter", 3 * chunk * 8));

    // The odd bf16 chunk puts chunk boundaries at 2-byte offsets.
    std::vector<std::uint16_t> gathered_bf(n, 0xFFFF);
    std::vector<std::int64_t> gathered_i64(n, -1);
    for (std::size_t i = mine; i < mine + chunk; ++i) {
      gathered_bf[i] = static_cast<std::uint16_t>(i * 7);
      gathered_i64[i] = -(std::int64_t{1} << 50) + static_cast<std::int64_t>(i);
    }
    comm.all_gather(comm.world_group(), gathered_bf.data(), chunk, ElemType::BF16);
    comm.all_gather(comm.world_group(), gathered_i64.data(), chunk, ElemType::I64);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(gathered_bf[i] == static_cast<std::uint16_t>(i * 7));
      REQUIRE(gathered_i64[i] == -(std::int64_t{1} << 50) + static_cast<std::int64_t>(i));
    }
    CHECK(logged(comm, "all_gather", 3 * chunk * 2));
    CHECK(logged(comm, "all_gather", 3 * chunk * 8));
  });
  // Rounding in the ring: each chunk is one fp32 add of two ranks' values, rounded once.
  run_gloo_ranks(2, [](Comm& comm) {
    const float values[2][4] = {{256.0f, 256.0f, 1.0f, 3.0f}, {1.0f, 3.0f, 256.0f, 256.0f}};
    std::uint16_t x[4];
    for (int k = 0; k < 4; ++k) x[k] = f32_to_bf16(values[comm.rank()][k]);
    comm.reduce_scatter(comm.world_group(), x, 2, ElemType::BF16);
    const std::uint16_t* mine = x + 2 * comm.rank();
    CHECK(bf16_to_f32(mine[0]) == 256.0f);
    CHECK(bf16_to_f32(mine[1]) == 260.0f);
  });
}

TEST_CASE("new_group connects every group of two or more on every rank, members or not") {
  RecordingComm comm(0, 4);
  comm.new_group("pair01", {0, 1});
  comm.new_group("pair23", {2, 3});
  comm.new_group("alone", {0});
  comm.new_group("others", {1, 2, 3});
  CHECK(comm.connected == std::vector<std::pair<std::string, bool>>{
                              {"pair01", true}, {"pair23", false}, {"others", false}});
  CHECK_FALSE(comm.takes_device_memory());
}

TEST_CASE("parallel groups: every rank builds every group in grid order and keeps its own") {
  // Megatron's worked example (8 ranks, tp = dp = pp = 2), llama with 1 kv head: the two tp ranks
  // share it; a tied head would add embedding groups of the first and last stage.
  const ptrain::config::LoadResult job = ptrain::test::load_job(
      "name: t\nmodel: {arch: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 1, ffn_hidden: 128, vocab: 64}\n"
      "parallel: {tp: 2, pp: 2}\ntrain: {global_batch: 8}\ncluster: {gpus_per_node: 8}\n");
  RecordingComm comm(5, 8);
  const ParallelGroups g = make_parallel_groups(job.spec, comm, true);
  CHECK(g.dp->name == "dp-cp[5,7]");
  CHECK(g.tp->name == "tp[4,5]");
  CHECK(g.kv_copies->name == "kv[4,5]");
  CHECK(g.pp->name == "pp[1,5]");
  CHECK(g.embedding->name == "embedding[1,5]");
  CHECK((g.cp == nullptr && g.ep == nullptr && g.expert_dp == nullptr));
  CHECK((g.tp_rank == 1 && g.pp_rank == 1 && g.dp_rank == 0 && g.ep_rank == 0));
  CHECK(comm.connected.size() == 4 + 4 + 4 + 4 + 4);  // dp-cp, tp, kv, pp, embedding: 4 groups each
  RecordingComm too_few(0, 4);
  CHECK_THROWS_WITH(make_parallel_groups(job.spec, too_few, false),
                    Catch::Contains("the job has 8 ranks but 4 processes were started"));
  CHECK(kv_copy_groups({{0, 1, 2, 3}}, 4, 2) == ptrain::grid::GroupList{{0, 1}, {2, 3}});
  CHECK(kv_copy_groups({{0, 1}}, 2, 2).empty());
}

TEST_CASE("all_to_allv, broadcast, send/recv and barrier") {
  run_gloo_ranks(3, [](Comm& comm) {
    const int me = comm.rank();
    // Rank i sends j+1 copies of (10*i + j) to rank j.
    std::vector<std::size_t> send_counts = {1, 2, 3}, recv_counts(3, static_cast<std::size_t>(me + 1));
    std::vector<float> in, out(static_cast<std::size_t>(3 * (me + 1)), -1.0f);
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k <= j; ++k) in.push_back(static_cast<float>(10 * me + j));
    comm.all_to_allv(comm.world_group(), in.data(), send_counts, out.data(), recv_counts);
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k <= me; ++k)
        REQUIRE(out[static_cast<std::size_t>(i * (me + 1) + k)] == 10.0f * i + me);

    char text[16] = {};
    if (me == 1) std::copy_n("from one", 8, text);
    comm.broadcast(comm.world_group(), text, sizeof text, 1);
    REQUIRE(std::string(text) == "from one");

    std::string s = me == 2 ? std::string(5000, 'x') : "";
    comm.broadcast_string(comm.world_group(), s, 2);
    REQUIRE(s.size() == 5000);
    const auto all = comm.gather_strings(comm.world_group(), "rank" + std::to_string(me), 0);
    if (me == 0)
      REQUIRE(all == std::vector<std::string>{"rank0", "rank1", "rank2"});
    else
      REQUIRE(all.empty());

    // A ring of point-to-point messages, twice (messages between a pair match in order).
    for (int round = 0; round < 2; ++round) {
      const int next = (me + 1) % 3, prev = (me + 2) % 3;
      const std::int64_t sent = 100 * round + me;
      std::int64_t got = -1;
      if (me == 0) {
        comm.send(comm.world_group(), &sent, sizeof sent, next);
        comm.recv(comm.world_group(), &got, sizeof got, prev);
      } else {
        comm.recv(comm.world_group(), &got, sizeof got, prev);
        comm.send(comm.world_group(), &sent, sizeof sent, next);
      }
      REQUIRE(got == 100 * round + prev);
    }
    comm.barrier(comm.world_group());
  });
}

TEST_CASE("gloo: sends left in flight, on independent channels") {
  run_gloo_ranks(2, [](Comm& comm) {
    const Group& world = comm.world_group();
    const int me = comm.rank(), peer = 1 - me;
    comm.open_channels(world, {{0, 1, 0}, {1, 0, 0}, {0, 1, 1}}, 4000);  // Gloo has nothing to set up
    REQUIRE_THROWS_WITH(comm.open_channels(world, {{0, 0, 1}}, 8),
                        Catch::Contains("bad channel 1 from 0 to 0"));
    REQUIRE_THROWS_AS(comm.open_channels(world, {{0, 2, 0}}, 8), DistError);
    // Both ranks send before either receives: blocking sends would wait for each other forever.
    const std::vector<float> out(1000, static_cast<float>(me + 1));
    Comm::SendHandle pending = comm.isend(world, out.data(), out.size() * sizeof(float), peer);
    std::vector<float> in(1000, 0.0f);
    comm.recv(world, in.data(), in.size() * sizeof(float), peer);
    pending.wait();
    REQUIRE(in == std::vector<float>(1000, static_cast<float>(peer + 1)));

    // Rank 0 sends on channel 1 first, rank 1 receives channel 0 first: each channel keeps its
    // own order, whatever the order across channels.
    std::int64_t a = 0, b = 0;
    if (me == 0) {
      const std::int64_t first = 11, second = 22;
      Comm::SendHandle h1 = comm.isend(world, &first, sizeof first, 1, /*channel=*/1);
      Comm::SendHandle h0 = comm.isend(world, &second, sizeof second, 1, /*channel=*/0);
      h0.wait();
      h1.wait();
    } else {
      comm.recv(world, &a, sizeof a, 0, /*channel=*/0);
      comm.recv(world, &b, sizeof b, 0, /*channel=*/1);
      REQUIRE(a == 22);
      REQUIRE(b == 11);
    }
    REQUIRE_THROWS_AS(comm.isend(world, &a, sizeof a, peer, 256), DistError);
    comm.barrier(world);
  });
}

TEST_CASE("groups: every rank creates every group, collectives stay inside their group") {
  run_gloo_ranks(4, [](Comm& comm) {
    const Group& even = comm.new_group("even", {0, 2});
    const Group& odd = comm.new_group("odd", {1, 3});
    const Group& mine = comm.rank() % 2 == 0 ? even : odd;
    REQUIRE(mine.index == comm.rank() / 2);
    REQUIRE_FALSE((comm.rank() % 2 == 0 ? odd : even).has_me());
    std::int64_t n = comm.rank();
    comm.all_reduce(mine, &n, 1);
    REQUIRE(n == (comm.rank() % 2 == 0 ? 0 + 2 : 1 + 3));
    REQUIRE_THROWS_AS(comm.barrier(comm.rank() % 2 == 0 ? odd : even), DistError);
  });
}

TEST_CASE("a rank that never joins makes the others time out with their collective logs") {
  StoreServer server("127.0.0.1", 0, "t");
  std::string error, log;
  std::thread waiting([&] {
    StoreClient client("127.0.0.1", server.port(), "t", 10s);
    auto comm = make_gloo_comm(client, 0, 2, {"127.0.0.1", 5s});
    std::int64_t n = 1;
    comm->all_reduce(comm->world_group(), &n, 1);  // both ranks do this one
    try {
      comm->barrier(comm->world_group());  // rank 1 goes elsewhere
    } catch (const CollectiveError& e) {
      error = e.what();
      log = e.log_dump();
    }
  });
  StoreClient client("127.0.0.1", server.port(), "t", 10s);
  auto comm = make_gloo_comm(client, 1, 2, {"127.0.0.1", 5s});
  std::int64_t n = 1;
  comm->all_reduce(comm->world_group(), &n, 1);
  const auto t0 = std::chrono::steady_clock::now();
  waiting.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);  // timed out, not hung
  CHECK_THAT(error, Catch::Contains("rank 0") && Catch::Contains("barrier #") && Catch::Contains("group world"));
  CHECK_THAT(log, Catch::Contains("all_reduce") && Catch::Contains("took") && Catch::Contains("IN FLIGHT"));
  CHECK_THAT(comm->log().dump(), Catch::Contains("all_reduce"));
}

TEST_CASE("a one-process world needs no transport") {
  auto comm = make_solo_comm();
  float x[3] = {1, 2, 3};
  comm->all_reduce(comm->world_group(), x, 3);
  comm->reduce_scatter(comm->world_group(), x, 3);
  comm->all_gather(comm->world_group(), x, 3);
  CHECK(x[2] == 3.0f);
  std::string s = "kept";
  comm->broadcast_string(comm->world_group(), s, 0);
  CHECK(s == "kept");
  CHECK(comm->gather_strings(comm->world_group(), "me", 0) == std::vector<std::string>{"me"});
  CHECK_THROWS_AS(comm->send(comm->world_group(), x, 4, 0), DistError);
}
