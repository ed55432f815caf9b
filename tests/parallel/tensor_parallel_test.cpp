// TensorParallel's collectives on real ranks (threads, Gloo over TCP): sums, all-gathers and
// reduce-scatters of F32 and BF16 buffers over the tp group, the kv-copy sums over a subgroup, and the
// same results through host staging when the buffers are a device's (the CPU ops under a device's
// name), as with ranks sharing one GPU.
#include "engine/parallel/tensor_parallel.h"

#include <catch2/catch.hpp>
#include <vector>

#include "kernels/bf16.h"
#include "tests/gloo_ranks.h"
#include "tests/pretend_device_ops.h"

namespace {

using namespace ptrain;
using kernels::Buf;
using kernels::DType;

// Runs the collectives on every rank of a tp group of 4 (kv copies: ranks {0,1} and {2,3}) with
// buffers in `memory`, checking each result.
void check_collectives(const kernels::Ops& memory) {
  test::run_gloo_ranks(4, [&](dist::Comm& comm) {
    const dist::Group& tp = comm.new_group("tp", {0, 1, 2, 3});
    const dist::Group& low = comm.new_group("kv[0,1]", {0, 1});
    const dist::Group& high = comm.new_group("kv[2,3]", {2, 3});
    parallel::TensorParallel group(comm, memory, tp, comm.rank() < 2 ? &low : &high);
    const int r = comm.rank();
    CHECK(group.rank() == r);
    CHECK(group.first_kv_copy() == (r % 2 == 0));

    std::vector<float> x = {1.0f + r, 10.0f * r};
    group.sum_partials({x.data(), DType::F32}, 2);
    CHECK(x == std::vector<float>{10.0f, 60.0f});

    std::vector<float> chunks(8, -1.0f);
    chunks[2 * r] = static_cast<float>(r), chunks[2 * r + 1] = 100.0f + r;
    group.gather_chunks({chunks.data(), DType::F32}, 2);
    CHECK(chunks == std::vector<float>{0, 100, 1, 101, 2, 102, 3, 103});

    std::vector<float> parts(8);
    for (int i = 0; i < 8; ++i)
      parts[i] = static_cast<float>(i + r);  // chunk c of rank r: 2c + r, 2c + 1 + r
    group.sum_scatter({parts.data(), DType::F32}, 2);
    CHECK(parts[2 * r] == 4.0f * 2 * r + 6);
    CHECK(parts[2 * r + 1] == 4.0f * (2 * r + 1) + 6);

    std::vector<std::uint16_t> half = {kernels::f32_to_bf16(0.5f * (r + 1))};
    group.sum_partials({half.data(), DType::BF16}, 1);
    CHECK(kernels::bf16_to_f32(half[0]) == 5.0f);

    std::vector<float> kv = {static_cast<float>(r)};
    group.sum_kv_copies({kv.data(), DType::F32}, 1);
    CHECK(kv[0] == (r < 2 ? 1.0f : 5.0f));
  });
}

}  // namespace

TEST_CASE("the residual stream around tensor-parallel layers, with and without sequence parallelism") {
  // What each rank saw, checked on the test's thread once the ranks are done (Catch2 assertions are
  // not thread-safe).
  struct Seen {
    bool sequence_parallel = false, adds_bias = false, sum_in_place = false, gathered_into_full = false;
    std::vector<float> sum, gathered;
  };
  for (const bool sp : {false, true}) {
    std::vector<Seen> seen(2);
    test::run_gloo_ranks(2, [&](dist::Comm& comm) {
      const dist::Group& tp = comm.new_group("tp", {0, 1});
      parallel::TensorParallel group(comm, kernels::cpu_ops(), tp, nullptr, sp);
      const int r = comm.rank();
      Seen& s = seen[static_cast<std::size_t>(r)];
      s.sequence_parallel = group.sequence_parallel();
      std::vector<float> bias = {1.0f};
      s.adds_bias = group.row_parallel_bias({bias.data(), DType::F32}).ptr == bias.data();
      // Four tokens' partial sums (one value each); with SP this rank keeps tokens 2r, 2r + 1.
      std::vector<float> full = {1.0f + r, 2.0f + r, 3.0f + r, 4.0f + r};
      const std::int64_t mine = sp ? 2 : 4;
      const float* got = group.reduce_tokens({full.data(), DType::F32}, mine).as<float>();
      s.sum_in_place = got == full.data() + (sp ? 2 * r : 0);
      s.sum.assign(got, got + mine);
      // Back to every token: this rank's part gathered with the other's (SP), else itself.
      std::vector<float> part = {10.0f * r, 10.0f * r + 1.0f}, gathered(4, -1.0f);
      const Buf all = group.gather_tokens({part.data(), DType::F32}, {gathered.data(), DType::F32}, 2);
      s.gathered_into_full = all.ptr == gathered.data();
      s.gathered = sp ? gathered : part;
    });
    for (int r = 0; r < 2; ++r) {
      INFO("sequence parallel " << sp << ", rank " << r);
      const Seen& s = seen[static_cast<std::size_t>(r)];
      CHECK(s.sequence_parallel == sp);
      CHECK(s.adds_bias == (r == 0));
      CHECK(s.sum_in_place);
      // Token t's sum over the two ranks: (t + 1) + (t + 2).
      std::vector<float> want;
      for (int t = sp ? 2 * r : 0; t < (sp ? 2 * r + 2 : 4); ++t) want.push_back(2.0f * t + 3.0f);
      CHECK(s.sum == want);
      CHECK(s.gathered_into_full == sp);
      CHECK(s.gathered == (sp ? std::vector<float>{0.0f, 1.0f, 10.0f, 11.0f}
                              : std::vector<float>{10.0f * r, 10.0f * r + 1.0f}));
    }
  }
}

TEST_CASE("tensor-parallel collectives over 4 Gloo ranks, in host memory and through host staging") {
  SECTION("CPU buffers pass straight through") {
    check_collectives(kernels::cpu_ops());
  }
  SECTION("a device's buffers go through the host") {
    const test::PretendDeviceOps device;
    check_collectives(device);
    CHECK(device.copies_out > 0);  // every collective went through a host copy and back
    CHECK(device.copies_in == device.copies_out);
  }
}
