// Delayed scaling: Fp8History's bookkeeping (the step's amaxes max-reduced over the ranks, pushed
// newest first, a cast's scale the history's largest, non-finite values kept out, a restore of
// another length) and BlockLinears under it: before any step its casts scale by their current amax
// and record it; after, they scale by the history -- no collective -- and record this step's.
#include "engine/model/fp8_history.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/model/block_linears.h"

namespace {

using namespace ptrain;
using kernels::Buf;
using kernels::DType;
using kernels::Fp8Format;
using model::Fp8History;
using model::Fp8Linear;
using Vec = std::vector<float>;

Buf buf(Vec& v) { return {v.data(), DType::F32}; }

Vec read(Buf b, std::size_t n) {
  Vec v(n);
  kernels::cpu_ops().copy_to_host(v.data(), b, n * sizeof(float));
  return v;
}

void write(Buf b, Vec v) { kernels::cpu_ops().copy_to_device(b, v.data(), v.size() * sizeof(float)); }

// The history entry of (layer, linear, operand) at age `age` (0 = newest).
float entry(const Fp8History& h, int layer, Fp8Linear which, int operand, int age) {
  const auto linears = static_cast<std::size_t>(h.saved_shape()[1]);
  const std::size_t cast =
      (static_cast<std::size_t>(layer) * linears + static_cast<std::size_t>(model::fp8_linear_index(which))) *
          model::kFp8Operands +
      static_cast<std::size_t>(operand);
  return h.saved()[cast * static_cast<std::size_t>(h.length()) + static_cast<std::size_t>(age)];
}

}  // namespace

TEST_CASE("Fp8History pushes each step's reduced amaxes and scales by the largest of the last steps", "[fp8]") {
  Fp8History h(kernels::cpu_ops(), 2, model::kFp8DenseLinears, 3);
  CHECK_FALSE(h.filled());
  const model::Fp8LinearAmaxes down = h.linear(1, model::fp8_linear_index(Fp8Linear::Down));
  // Three steps' records of layer 1's down projection; another rank holds twice the input's amax at
  // step 1 (the reduction over ranks is the largest).
  const float steps[4][3] = {{1, 8, 0.5f}, {2, 4, 0.25f}, {3, 2, 0.125f}, {0.5f, 1, 0.0625f}};
  for (int s = 0; s < 4; ++s) {
    write(down.record, {steps[s][0], steps[s][1], steps[s][2]});
    h.end_step([&](float* v, std::int64_t n) {
      REQUIRE(n == 2 * 7 * 3);
      if (s == 1) v[(1 * 7 + model::fp8_linear_index(Fp8Linear::Down)) * 3 + 1] *= 2;
    });
    CHECK(h.filled());
    CHECK(read(down.record, 3) == Vec{0, 0, 0});  // cleared for the next step
  }
  // Newest first: step 3, 2, 1 (step 0 has rolled out of a history of 3).
  CHECK(entry(h, 1, Fp8Linear::Down, 0, 0) == 0.5f);
  CHECK(entry(h, 1, Fp8Linear::Down, 0, 2) == 2.0f);
  CHECK(entry(h, 1, Fp8Linear::Down, 1, 2) == 8.0f);  // 4, doubled by the other rank
  CHECK(read(down.scale, 3) == Vec{3, 8, 0.25f});
  CHECK(read(h.linear(0, model::fp8_linear_index(Fp8Linear::Q)).scale, 3) == Vec{0, 0, 0});  // nothing recorded: scale 1

  // A non-finite amax (an overflow the step's check names) is pushed as 0; discard_step pushes nothing.
  write(down.record, {std::numeric_limits<float>::infinity(), std::nanf(""), 1});
  h.end_step([](float*, std::int64_t) {});
  CHECK(entry(h, 1, Fp8Linear::Down, 0, 0) == 0.0f);
  CHECK(entry(h, 1, Fp8Linear::Down, 1, 0) == 0.0f);
  CHECK(read(down.scale, 3) == Vec{3, 2, 1});
  write(down.record, {100, 100, 100});
  h.discard_step();
  CHECK(read(down.record, 3) == Vec{0, 0, 0});
  CHECK(read(down.scale, 3) == Vec{3, 2, 1});
}

TEST_CASE("Fp8History restores a saved history of another length, newest entries first", "[fp8]") {
  Fp8History saved(kernels::cpu_ops(), 1, model::kFp8DenseLinears, 4);
  for (float s : {1.0f, 2.0f, 3.0f, 4.0f}) {
    write(saved.linear(0, model::fp8_linear_index(Fp8Linear::O)).record, {s, 10 * s, 100 * s});
    saved.end_step([](float*, std::int64_t) {});
  }
  Fp8History shorter(kernels::cpu_ops(), 1, model::kFp8DenseLinears, 2),
      longer(kernels::cpu_ops(), 1, model::kFp8DenseLinears, 6);
  shorter.restore(saved.saved(), 4);
  longer.restore(saved.saved(), 4);
  CHECK(shorter.filled());
  CHECK(entry(shorter, 0, Fp8Linear::O, 1, 0) == 40.0f);
  CHECK(entry(shorter, 0, Fp8Linear::O, 1, 1) == 30.0f);
  CHECK(read(shorter.linear(0, model::fp8_linear_index(Fp8Linear::O)).scale, 3) == Vec{4, 40, 400});
  CHECK(entry(longer, 0, Fp8Linear::O, 2, 3) == 100.0f);
  CHECK(entry(longer, 0, Fp8Linear::O, 2, 4) == 0.0f);
  CHECK_THROWS_AS(shorter.restore(Vec(5), 4), std::invalid_argument);
}

TEST_CASE("an MoE layer's histories: attention's four linear layers, then each expert's three", "[fp8]") {
  Fp8History h(kernels::cpu_ops(), 2, 4 + 3 * 8, 1);
  CHECK(h.saved_shape() == std::vector<std::int64_t>{2, 28, 3, 1});
  CHECK(model::fp8_expert_linear_index(0, Fp8Linear::Gate) == 4);
  CHECK(model::fp8_expert_linear_index(7, Fp8Linear::Down) == 27);
  CHECK_THROWS_AS(model::fp8_expert_linear_index(0, Fp8Linear::Q), std::invalid_argument);
  // Expert 7's down projection of layer 1 is the last cast.
  write(h.linear(1, model::fp8_expert_linear_index(7, Fp8Linear::Down)).record, {1, 2, 3});
  h.end_step([](float*, std::int64_t) {});
  CHECK(h.saved().back() == 3.0f);
}

TEST_CASE("BlockLinears under delayed scaling: current amaxes until a step is recorded, then the history's",
          "[fp8]") {
  const kernels::Ops& ops = kernels::cpu_ops();
  constexpr int M = 4, N = 4, K = 8;
  Vec x(M * K), w(N * K);
  for (int i = 0; i < M * K; ++i) x[static_cast<std::size_t>(i)] = std::ldexp(1.0f + 0.01f * i, -(i % 12));
  for (int i = 0; i < N * K; ++i) w[static_cast<std::size_t>(i)] = 0.03f * static_cast<float>((i % 7) - 3);
  std::vector<std::uint8_t> scratch_in(M * K), scratch_w(N * K), scratch_dy(M * N), scratch_dy_t(M * N);
  Vec scratch_amax(3), scratch_inv_scale(3);
  const model::Fp8Scratch scratch{{scratch_in.data(), DType::E4M3},   {scratch_w.data(), DType::E4M3},
                                  {scratch_dy.data(), DType::E5M2},   buf(scratch_amax),
                                  {scratch_dy_t.data(), DType::E5M2}, buf(scratch_inv_scale)};
  Fp8History h(ops, 1, model::kFp8DenseLinears, 2);
  const model::Fp8LinearAmaxes amaxes = h.linear(0, model::fp8_linear_index(Fp8Linear::Q));
  auto linears = [&] {
    return model::BlockLinears(ops, config::Precision::Fp8, scratch, nullptr, nullptr,
                               model::BlockLinears::Delayed{amaxes, h.filled()});
  };
  const model::BlockLinears current(ops, config::Precision::Fp8, scratch, nullptr, nullptr);
  Vec out(M * N), want(M * N);

  float x_amax = 0, w_amax = 0;
  for (float v : x) x_amax = std::max(x_amax, std::fabs(v));
  for (float v : w) w_amax = std::max(w_amax, std::fabs(v));
  // Before any step: as current scaling, recording the amaxes it took.
  linears().forward(buf(out), buf(x), buf(w), Buf{}, M, N, K);
  current.forward(buf(want), buf(x), buf(w), Buf{}, M, N, K);
  CHECK(out == want);
  const Vec recorded = read(amaxes.record, 3);
  CHECK(recorded[0] == 0.0f);  // no output gradient in a forward
  CHECK(recorded[1] == x_amax);
  CHECK(recorded[2] == w_amax);

  // A step whose input reached 64: the next forward scales x by 2^2 where its own amax (below 2)
  // would scale it by 2^7 or 2^8, so x's entries below 2^-8 fall into E4M3's subnormals where its
  // own scale kept them normal: the product differs.
  REQUIRE(x_amax < 2);
  write(amaxes.record, {0, 64, w_amax});
  h.end_step([](float*, std::int64_t) {});
  linears().forward(buf(out), buf(x), buf(w), Buf{}, M, N, K);
  Vec qx = x, qw = w, history_amax{64, w_amax};
  ops.fp8_round(buf(qx), buf(qx), {&history_amax[0], DType::F32}, M * K, Fp8Format::E4M3);
  ops.fp8_round(buf(qw), buf(qw), {&history_amax[1], DType::F32}, N * K, Fp8Format::E4M3);
  ops.linear_forward(buf(want), buf(qx), buf(qw), Buf{}, M, N, K);
  CHECK(out == want);
  Vec by_current(M * N);
  current.forward(buf(by_current), buf(x), buf(w), Buf{}, M, N, K);
  CHECK(out != by_current);
  CHECK(read(amaxes.record, 3) == Vec{0, x_amax, w_amax});  // this step's, for the next
}
