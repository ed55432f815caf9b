// The NCCL Comm on real GPUs: one thread per rank in this process, each on its own device with its
// own compute stream, a store hosted in-process. Needs two CUDA devices (three for the non-member
// split); main() exits 77 (ctest's SKIP_RETURN_CODE) with fewer.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/nccl_comm.h"
#include "engine/rendezvous/store.h"
#include "kernels/bf16.h"

namespace {

using namespace ptrain::dist;
using namespace std::chrono_literals;
using ptrain::kernels::bf16_to_f32;
using ptrain::kernels::f32_to_bf16;

void cuda(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + cudaGetErrorString(status));
}

struct Rank {
  Comm& comm;
  cudaStream_t stream;  // the rank's compute stream
};

// A device array; reads and writes go through the compute stream, as the engine's would.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(const std::vector<T>& values, cudaStream_t stream) : size_(values.size()), stream_(stream) {
    void* p = nullptr;
    cuda(cudaMalloc(&p, bytes()));
    data_ = static_cast<T*>(p);
    cuda(cudaMemcpyAsync(data_, values.data(), bytes(), cudaMemcpyHostToDevice, stream_));
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() { return data_; }
  std::vector<T> read() const {
    std::vector<T> values(size_);
    cuda(cudaMemcpyAsync(values.data(), data_, bytes(), cudaMemcpyDeviceToHost, stream_));
    cuda(cudaStreamSynchronize(stream_));
    return values;
  }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  std::size_t size_;
  cudaStream_t stream_;
  T* data_ = nullptr;
};

// Runs body on `world` ranks, rank r on device r. `on_failure` receives watchdog reports.
void run_ranks(int world, const std::function<void(Rank&)>& body, std::chrono::milliseconds timeout = 60s,
               const NcclFailureFn& on_failure = {}) {
  StoreServer server("127.0.0.1", 0, "test-token");
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        cuda(cudaSetDevice(r));
        cudaStream_t stream = nullptr;
        cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        {
          StoreClient client("127.0.0.1", server.port(), "test-token", 10s);
          auto comm = make_nccl_comm(client, r, world, {timeout, stream, on_failure});
          Rank rank{*comm, stream};
          body(rank);
        }
        cuda(cudaStreamDestroy(stream));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
  for (const std::string& e : errors) CHECK(e.empty());
}

// Multiples of 1/4 below 64: sums of two are exact in bf16 and in fp32.
float small_value(int rank, std::size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 20) * 0.25f; }

}  // namespace

TEST_CASE("all_reduce on device memory: f32, bf16, max") {
  run_ranks(2, [](Rank& r) {
    const int me = r.comm.rank();
    REQUIRE(r.comm.takes_device_memory());
    const std::size_t n = 100000;
    std::vector<float> f(n);
    std::vector<std::uint16_t> b(n);
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = small_value(me, i);
      b[i] = f32_to_bf16(small_value(me, i));
    }
    DeviceArray<float> sum(f, r.stream), max(f, r.stream);
    DeviceArray<std::uint16_t> bsum(b, r.stream);
    r.comm.all_reduce(r.comm.world_group(), sum.data(), n);
    r.comm.all_reduce(r.comm.world_group(), max.data(), n, ReduceOp::Max);
    r.comm.all_reduce(r.comm.world_group(), bsum.data(), n, ElemType::BF16);
    const auto got = sum.read(), got_max = max.read();
    const auto got_b = bsum.read();
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(got[i] == small_value(0, i) + small_value(1, i));
      REQUIRE(got_max[i] == small_value(1, i));
      REQUIRE(bf16_to_f32(got_b[i]) == small_value(0, i) + small_value(1, i));
    }
  });
}

TEST_CASE("in-place reduce_scatter and all_gather on device memory") {
  run_ranks(2, [](Rank& r) {
    const int me = r.comm.rank();
    const std::size_t chunk = 1001, n = 2 * chunk;  // odd: bf16 chunks start at 2-byte offsets
    std::vector<float> f(n);
    std::vector<std::uint16_t> b(n);
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = small_value(me, i);
      b[i] = f32_to_bf16(small_value(me, i));
    }
    DeviceArray<float> fd(f, r.stream);
    DeviceArray<std::uint16_t> bd(b, r.stream);
    r.comm.reduce_scatter(r.comm.world_group(), fd.data(), chunk);
    r.comm.reduce_scatter(r.comm.world_group(), bd.data(), chunk, ElemType::BF16);
    const auto got = fd.read();
    const auto got_b = bd.read();
    const std::size_t mine = static_cast<std::size_t>(me) * chunk;
    for (std::size_t i = mine; i < mine + chunk; ++i) {
      REQUIRE(got[i] == small_value(0, i) + small_value(1, i));
      REQUIRE(bf16_to_f32(got_b[i]) == small_value(0, i) + small_value(1, i));
    }

    std::vector<float> g(n, -1.0f);
    std::vector<std::int64_t> gi(n, -1);
    for (std::size_t i = mine; i < mine + chunk; ++i) {
      g[i] = static_cast<float>(i) + 0.5f;
      gi[i] = (std::int64_t{1} << 40) + static_cast<std::int64_t>(i);
    }
    DeviceArray<float> gd(g, r.stream);
    DeviceArray<std::int64_t> gid(gi, r.stream);
    r.comm.all_gather(r.comm.world_group(), gd.data(), chunk);
    r.comm.all_gather(r.comm.world_group(), gid.data(), chunk, ElemType::I64);
    const auto gathered = gd.read();
    const auto gathered_i = gid.read();
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(gathered[i] == static_cast<float>(i) + 0.5f);
      REQUIRE(gathered_i[i] == (std::int64_t{1} << 40) + static_cast<std::int64_t>(i));
    }
  });
}

TEST_CASE("device collectives follow the compute stream and the compute stream follows them") {
  run_ranks(2, [](Rank& r) {
    const std::size_t n = 1 << 22;
    float* host = nullptr;  // pinned, so the copies below are asynchronous on the compute stream
    cuda(cudaMallocHost(reinterpret_cast<void**>(&host), n * sizeof(float)));
    DeviceArray<float> data(std::vector<float>(n, 0.0f), r.stream);
    for (int round = 1; round <= 3; ++round) {
      for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(round * (r.comm.rank() + 1));
      cuda(cudaMemcpyAsync(data.data(), host, n * sizeof(float), cudaMemcpyHostToDevice, r.stream));
      r.comm.all_reduce(r.comm.world_group(), data.data(), n);
      cuda(cudaMemcpyAsync(host, data.data(), n * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
      cuda(cudaStreamSynchronize(r.stream));
      for (std::size_t i = 0; i < n; i += 4093) REQUIRE(host[i] == static_cast<float>(3 * round));
    }
    cudaFreeHost(host);
  });
}

TEST_CASE("opened channels keep sends in flight: two ranks send each other 64 MiB before receiving") {
  run_ranks(2, [](Rank& r) {
    const int me = r.comm.rank(), peer = 1 - me;
    const Group& world = r.comm.world_group();
    REQUIRE(r.comm.sends_in_flight());
    // The pipeline's pattern: activations 0 -> 1 on channel 0, gradients 1 -> 0 on channel 1; and
    // both directions of channel 0 (interleaved schedules send activations around the ring).
    r.comm.open_channels(world, {{0, 1, 0}, {1, 0, 0}, {1, 0, 1}}, 64 << 20);
    const std::size_t n = std::size_t{16} << 20;  // far beyond NCCL's buffers: a send waits for its receive
    for (int round = 0; round < 3; ++round) {
      DeviceArray<float> out(std::vector<float>(n, static_cast<float>(10 * me + round)), r.stream);
      DeviceArray<float> in(std::vector<float>(n, -1.0f), r.stream);
      const int channel = me == 1 && round == 1 ? 1 : 0;  // rank 1 sends gradients in round 1
      Comm::SendHandle sent = r.comm.isend(world, out.data(), n * sizeof(float), peer, channel);
      r.comm.recv(world, in.data(), n * sizeof(float), peer, me == 0 && round == 1 ? 1 : 0);
      sent.wait();
      const auto got = in.read();
      for (std::size_t i = 0; i < n; i += 4099) REQUIRE(got[i] == static_cast<float>(10 * peer + round));
    }
    CHECK_THROWS_WITH(r.comm.send(world, nullptr, 0, peer, 2), Catch::Contains("was not opened"));
  });
}

TEST_CASE("host memory is staged: scalars, strings, point-to-point, barrier, all_to_allv") {
  run_ranks(2, [](Rank& r) {
    const int me = r.comm.rank();
    const Group& world = r.comm.world_group();
    double loss = 0.25 * (me + 1);
    r.comm.all_reduce(world, &loss, 1);
    CHECK(loss == 0.75);
    std::int64_t stop = me;
    r.comm.all_reduce(world, &stop, 1, ReduceOp::Max);
    CHECK(stop == 1);
    std::vector<std::uint16_t> b(3, f32_to_bf16(me == 0 ? 256.0f : 3.0f));
    r.comm.all_reduce(world, b.data(), b.size(), ElemType::BF16);
    CHECK(bf16_to_f32(b[0]) == 260.0f);  // 259 rounds to the even neighbour, once

    std::string manifest = me == 1 ? std::string(200000, 'm') : "";  // larger than the first scratch
    r.comm.broadcast_string(world, manifest, 1);
    CHECK(manifest == std::string(200000, 'm'));
    const auto all = r.comm.gather_strings(world, "rank" + std::to_string(me), 0);
    if (me == 0) CHECK(all == std::vector<std::string>{"rank0", "rank1"});

    // Every rank sends one element to rank 0 and two to rank 1.
    const std::vector<float> in = {10.0f * me, 10.0f * me + 1, 10.0f * me + 2};
    const std::vector<std::size_t> send_counts = {1, 2}, recv_counts(2, static_cast<std::size_t>(me + 1));
    std::vector<float> out(2 * static_cast<std::size_t>(me + 1), -1.0f);
    r.comm.all_to_allv(world, in.data(), send_counts, out.data(), recv_counts);
    if (me == 0) CHECK(out == std::vector<float>{0.0f, 10.0f});
    else CHECK(out == std::vector<float>{1.0f, 2.0f, 11.0f, 12.0f});
    r.comm.barrier(world);
  });
}

TEST_CASE("groups are split from the world: reversed order, and a non-member when there are three GPUs") {
  const int world = visible_cuda_devices() >= 3 ? 3 : 2;
  run_ranks(world, [world](Rank& r) {
    const int me = r.comm.rank();
    std::vector<int> reversed;
    for (int k = world - 1; k >= 0; --k) reversed.push_back(k);
    const Group& rev = r.comm.new_group("reversed", reversed);
    const Group& alone = r.comm.new_group("alone", {me});
    const Group* pair = world == 3 ? &r.comm.new_group("pair02", {0, 2}) : nullptr;
    REQUIRE(rev.index == world - 1 - me);
    REQUIRE(alone.size() == 1);

    // Chunk k of the reversed group's reduce_scatter lands on its index k, world rank world-1-k.
    const std::size_t chunk = 5, n = chunk * static_cast<std::size_t>(world);
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) + static_cast<float>(me);
    DeviceArray<float> d(v, r.stream);
    r.comm.reduce_scatter(rev, d.data(), chunk);
    const auto got = d.read();
    const std::size_t mine = static_cast<std::size_t>(rev.index) * chunk;
    const float rank_sum = static_cast<float>(world * (world - 1) / 2);
    for (std::size_t i = mine; i < mine + chunk; ++i)
      REQUIRE(got[i] == static_cast<float>(world) * static_cast<float>(i) + rank_sum);

    if (pair != nullptr) {
      REQUIRE(pair->has_me() == (me != 1));
      if (pair->has_me()) {
        std::int64_t x = me;
        r.comm.all_reduce(*pair, &x, 1);
        CHECK(x == 2);
      }
    }
    r.comm.barrier(r.comm.world_group());
  });
}

TEST_CASE("a collective that never completes: the watchdog aborts and reports it with the log") {
  std::atomic<bool> reported{false};
  std::string what, log;
  run_ranks(
      2,
      [&](Rank& r) {
        // Together once first, so that NCCL has connected the ranks for this size of all_reduce.
        DeviceArray<float> d(std::vector<float>(1024, 1.0f), r.stream);
        r.comm.all_reduce(r.comm.world_group(), d.data(), 1024);
        REQUIRE(d.read()[0] == 2.0f);
        if (r.comm.rank() == 1) {
          // Rank 1 does not join the second; it waits for rank 0's report before leaving.
          const auto give_up = std::chrono::steady_clock::now() + 30s;
          while (!reported && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(10ms);
          return;
        }
        r.comm.all_reduce(r.comm.world_group(), d.data(), 1024);  // returns at once: on the device
        const auto give_up = std::chrono::steady_clock::now() + 30s;
        while (!reported && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(10ms);
        CHECK_THROWS_AS(r.comm.barrier(r.comm.world_group()), CollectiveError);
      },
      2s,
      [&](const std::string& w, const std::string& l) {
        if (w.rfind("rank 0:", 0) != 0) return;  // rank 1 may see rank 0's abort as an error of its own
        what = w;
        log = l;
        reported = true;
      });
  CHECK(reported);
  CHECK_THAT(what, Catch::Contains("rank 0") && Catch::Contains("all_reduce #") && Catch::Contains("group world") &&
                       Catch::Contains("did not finish"));
  CHECK_THAT(log, Catch::Contains("all_reduce") && Catch::Contains("IN FLIGHT"));
}

int main(int argc, char* argv[]) {
  if (visible_cuda_devices() < 2) {
    std::puts("fewer than two CUDA devices: skipped");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
