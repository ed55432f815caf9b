#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>

#include "engine/runtime/host_buffer.h"

using namespace ptrain;

TEST_CASE("host buffers are zeroed and 64-byte aligned") {
  runtime::HostBuffer b(1001, kernels::DType::F32);
  CHECK(b.size() == 1001);
  CHECK(b.bytes() == 4004);
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 64 == 0);
  for (int i = 0; i < 1001; ++i) CHECK(static_cast<float*>(b.data())[i] == 0.0f);
  CHECK(b.at(10).as<float>() == static_cast<float*>(b.data()) + 10);
}

TEST_CASE("the arena hands out aligned, disjoint views and refuses to overflow") {
  runtime::Arena arena(1024);
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
