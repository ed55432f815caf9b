// The CPU's bf16 staging (kernels/cpu/bf16_staging.h): its F32 temporaries come from a pool of the
// thread, so an op does not map and fault in fresh pages at every call (a third of a bf16 step did).
#include "kernels/cpu/bf16_staging.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/bf16.h"

using ptrain::kernels::Buf;
using ptrain::kernels::DType;
using ptrain::kernels::cpu::Bf16Staging;

namespace {

constexpr std::int64_t kCount = std::int64_t{1} << 20;  // 4 MB of floats: malloc maps such a block

const float* staged(Bf16Staging& s, std::vector<std::uint16_t>& bits) {
  return s.input(Buf{bits.data(), DType::BF16}, kCount).as<const float>();
}

}  // namespace

TEST_CASE("bf16 staging: a later op takes the block an earlier one released, values widened afresh") {
  std::vector<std::uint16_t> bits(kCount, ptrain::kernels::f32_to_bf16(1.5f));
  const float* first = nullptr;
  {
    Bf16Staging s;
    first = staged(s, bits);
    CHECK(first[kCount - 1] == 1.5f);
  }
  // A block of the same size held elsewhere: without the pool, malloc would hand it the released one.
  const auto elsewhere = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(kCount));
  bits.assign(kCount, ptrain::kernels::f32_to_bf16(-2.0f));
  Bf16Staging s;
  const float* again = staged(s, bits);
  CHECK(again == first);
  CHECK(again[0] == -2.0f);
  CHECK(again[kCount - 1] == -2.0f);
  // Two temporaries at once: the second is another block.
  std::vector<std::uint16_t> more(kCount / 2, ptrain::kernels::f32_to_bf16(3.0f));
  const float* second = s.input(Buf{more.data(), DType::BF16}, kCount / 2).as<const float>();
  CHECK(second != again);
  CHECK(second[kCount / 2 - 1] == 3.0f);
  CHECK(elsewhere.get() != first);
}
