// ContextParallel on real ranks (threads, Gloo over TCP): each rank's two chunks of a batch
// (take_chunks), the whole sequences gathered from every rank's chunks (gather_sequences), and
// full-sequence partial sums summed into each rank's chunks (sum_into_chunks), over cp 2 and 3 with
// two sequences per microbatch; and through host staging when the buffers are a device's.
#include "engine/parallel/context_parallel.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "tests/gloo_ranks.h"
#include "tests/pretend_device_ops.h"

namespace {

using namespace ptrain;
using kernels::DType;

constexpr int kB = 2, kCols = 3;

// A value naming (sequence b, position t, column c, tensor which).
float tag(int b, int t, int c, int which) {
  return 1000.0f * which + 100.0f * b + 10.0f * t + static_cast<float>(c);
}

void check_chunks(const kernels::Ops& memory, int cp) {
  const int T = 4 * cp;  // chunks of 2 positions
  test::run_gloo_ranks(cp, [&](dist::Comm& comm) {
    std::vector<int> ranks(static_cast<std::size_t>(cp));
    for (int i = 0; i < cp; ++i) ranks[static_cast<std::size_t>(i)] = i;
    parallel::ContextParallel group(comm, memory, comm.new_group("cp", ranks), kB, T);
    const int r = comm.rank(), L = group.chunk_len();
    REQUIRE(L == 2);
    CHECK(group.chunk_start(0) == r * L);
    CHECK(group.chunk_start(1) == (2 * cp - 1 - r) * L);

    // Token ids: this rank's rows are chunk-major [2, B, L].
    std::vector<std::int32_t> batch(static_cast<std::size_t>(kB * T)),
        mine(static_cast<std::size_t>(2 * kB * L));
    for (int i = 0; i < kB * T; ++i) batch[static_cast<std::size_t>(i)] = i;
    group.take_chunks(batch.data(), mine.data());
    std::size_t row = 0;
    for (int j = 0; j < 2; ++j)
      for (int b = 0; b < kB; ++b)
        for (int t = 0; t < L; ++t) CHECK(mine[row++] == b * T + group.chunk_start(j) + t);

    // Every rank's rows of two tensors, gathered into sequence order.
    const std::size_t local = static_cast<std::size_t>(2 * kB * L * kCols),
                      full = static_cast<std::size_t>(kB * T * kCols);
    std::vector<float> a(local), b(local), a_full(full, -1.0f), b_full(full, -1.0f), staging(2 * full);
    std::size_t i = 0;
    for (int j = 0; j < 2; ++j)
      for (int s = 0; s < kB; ++s)
        for (int t = 0; t < L; ++t)
          for (int c = 0; c < kCols; ++c, ++i) {
            a[i] = tag(s, group.chunk_start(j) + t, c, 0);
            b[i] = tag(s, group.chunk_start(j) + t, c, 1);
          }
    group.gather_sequences({{a.data(), DType::F32}, {b.data(), DType::F32}},
                           {{a_full.data(), DType::F32}, {b_full.data(), DType::F32}}, {staging.data(), DType::F32},
                           kCols);
    for (int s = 0; s < kB; ++s)
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < kCols; ++c) {
          const std::size_t at = (static_cast<std::size_t>(s) * T + t) * kCols + c;
          CHECK(a_full[at] == tag(s, t, c, 0));
          CHECK(b_full[at] == tag(s, t, c, 1));
        }

    // Partial sums over the whole sequence (rank r contributes r + 1 times the tag): each rank gets
    // its rows' sums.
    for (std::size_t k = 0; k < full; ++k) {
      a_full[k] = static_cast<float>(r + 1) * a_full[k];
      b_full[k] = -static_cast<float>(r + 1) * b_full[k];
    }
    std::fill(a.begin(), a.end(), 0.0f);
    std::fill(b.begin(), b.end(), 0.0f);
    group.sum_into_chunks({{a_full.data(), DType::F32}, {b_full.data(), DType::F32}},
                          {{a.data(), DType::F32}, {b.data(), DType::F32}}, {staging.data(), DType::F32}, kCols);
    // take_rows and place_rows: this rank's rows of a sequence-order tensor, out and back in.
    std::vector<float> taken(a.size()), placed(full, -1.0f);
    group.take_rows({a_full.data(), DType::F32}, {taken.data(), DType::F32}, kCols);
    group.place_rows({taken.data(), DType::F32}, {placed.data(), DType::F32}, kCols);
    i = 0;
    for (int j = 0; j < 2; ++j)
      for (int s = 0; s < kB; ++s)
        for (int t = 0; t < L; ++t)
          for (int c = 0; c < kCols; ++c, ++i) {
            const std::size_t at = (static_cast<std::size_t>(s) * T + group.chunk_start(j) + t) * kCols + c;
            CHECK(taken[i] == a_full[at]);
            CHECK(placed[at] == a_full[at]);
          }
    CHECK(std::count(placed.begin(), placed.end(), -1.0f) ==
          static_cast<std::ptrdiff_t>(full - a.size()));  // the other ranks' rows untouched
    const float ranks_sum = static_cast<float>(cp * (cp + 1) / 2);
    i = 0;
    for (int j = 0; j < 2; ++j)
      for (int s = 0; s < kB; ++s)
        for (int t = 0; t < L; ++t)
          for (int c = 0; c < kCols; ++c, ++i) {
            CHECK(a[i] == ranks_sum * tag(s, group.chunk_start(j) + t, c, 0));
            CHECK(b[i] == -ranks_sum * tag(s, group.chunk_start(j) + t, c, 1));
          }
  });
}

}  // namespace

TEST_CASE("context-parallel chunks, sequence gathers and sums over 2 and 3 Gloo ranks") {
  check_chunks(kernels::cpu_ops(), 2);
  check_chunks(kernels::cpu_ops(), 3);
}

TEST_CASE("context-parallel collectives on a device's buffers go through the host") {
  const test::PretendDeviceOps device;
  check_chunks(device, 2);
  CHECK(device.copies_out > 0);
  CHECK(device.copies_in == device.copies_out);
}

TEST_CASE("context parallelism needs a sequence of 2 cp equal chunks") {
  test::run_gloo_ranks(2, [&](dist::Comm& comm) {
    const dist::Group& cp = comm.new_group("cp", {0, 1});
    CHECK_THROWS_WITH(parallel::ContextParallel(comm, kernels::cpu_ops(), cp, 1, 6),
                      Catch::Contains("multiple of 2 * cp = 4"));
    // Neither rank closes its connections while the other may still be completing the group's
    // connect (Gloo pairs finish their handshake at different moments on a loaded machine).
    comm.barrier(cp);
  });
}
