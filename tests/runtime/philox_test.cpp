#include <catch2/catch.hpp>
#include <cmath>

#include "engine/runtime/philox.h"

using namespace ptrain::runtime;

// Known-answer vectors of Philox4x32-10 from Random123's kat_vectors (Salmon et al. 2011).
TEST_CASE("philox4x32-10 matches the published known-answer vectors") {
  CHECK(philox4x32({0, 0, 0, 0}, {0, 0}) == PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

// The normal samples drawn from these keys: tests/kernels/fill_normal_test.cpp.
TEST_CASE("stream keys differ by name and by seed, and pack as fill_normal takes them") {
  CHECK(stream_key(1234, name_hash("a")) != stream_key(1234, name_hash("b")));
  CHECK(stream_key(1234, 5) != stream_key(1235, 5));
  CHECK(packed({0x89abcdefu, 0x01234567u}) == 0x0123456789abcdefull);
}

TEST_CASE("uniform samples lie in the unit interval") {
  const PhiloxKey key = stream_key(7, 9);
  double sum = 0;
  for (std::uint64_t i = 0; i < 100000; ++i) {
    const float u = uniform_at(key, i);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
  }
  CHECK(std::abs(sum / 100000 - 0.5) < 0.01);
}

TEST_CASE("FNV-1a name hash matches the reference values") {
  CHECK(name_hash("") == 0xcbf29ce484222325ull);
  CHECK(name_hash("a") == 0xaf63dc4c8601ec8cull);
}
