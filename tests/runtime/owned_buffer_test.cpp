#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>

#include "engine/runtime/owned_buffer.h"
#include "kernels/ops.h"

using namespace ptrain;

TEST_CASE("buffers are zeroed and 256-byte aligned") {
  runtime::OwnedBuffer b(kernels::cpu_ops(), 1001, kernels::DType::F32);
  CHECK(b.size() == 1001);
  CHECK(b.bytes() == 4004);
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 256 == 0);
  for (int i = 0; i < 1001; ++i) CHECK(static_cast<float*>(b.data())[i] == 0.0f);
  CHECK(b.at(10).as<float>() == static_cast<float*>(b.data()) + 10);
}

TEST_CASE("the arena hands out aligned, disjoint views and refuses to overflow") {
  runtime::Arena arena(kernels::cpu_ops(), 1024);
  const kernels::Buf a = arena.take(3, kernels::DType::F32);
  const kernels::Buf b = arena.take(5, kernels::DType::I32);
  CHECK(reinterpret_cast<std::uintptr_t>(a.ptr) % 64 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(b.ptr) % 64 == 0);
  CHECK(static_cast<char*>(b.ptr) >= static_cast<char*>(a.ptr) + 12);
  CHECK(b.dtype == kernels::DType::I32);
  CHECK_THROWS_AS(arena.take(1000, kernels::DType::F32), std::logic_error);
  arena.reset();
  CHECK(arena.used_bytes() == 0);
}

TEST_CASE("the backend's copies move bytes in and out of its memory") {
  const kernels::Ops& ops = kernels::cpu_ops();
  runtime::OwnedBuffer a(ops, 5, kernels::DType::F32), b(ops, 5, kernels::DType::F32);
  const float in[5] = {1, 2, 3, 4, 5};
  ops.copy_to_device(a.at(), in, sizeof in);
  ops.copy(b.at(1), a.at(0), 4 * sizeof(float));
  float out[5] = {};
  ops.copy_to_host(out, b.at(), sizeof out);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 1.0f);
  CHECK(out[4] == 4.0f);
}
