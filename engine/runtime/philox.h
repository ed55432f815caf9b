// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011, "Parallel random numbers: as
// easy as 1, 2, 3"). A value depends only on (key, counter), never on call order, so every
// parameter element can be drawn from (seed, parameter name, global element index) on any rank of
// any layout and come out bitwise the same.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ptrain::runtime {

using PhiloxKey = std::array<std::uint32_t, 2>;
using PhiloxCounter = std::array<std::uint32_t, 4>;

// Ten rounds of Philox4x32 over one 128-bit counter (kernels/philox_normal.h's, which the backends use).
PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a name: turns a parameter name into part of the key.
std::uint64_t name_hash(std::string_view name);

// Key for a stream: the seed and a stream id (e.g. a name hash) mixed into 64 bits.
PhiloxKey stream_key(std::uint64_t seed, std::uint64_t stream);

// A key as Ops::fill_normal takes it (key[0] in the low 32 bits): its normal samples are drawn by
// the backend, where they are stored (kernels/philox_normal.h).
inline std::uint64_t packed(PhiloxKey key) { return key[0] | (static_cast<std::uint64_t>(key[1]) << 32); }

// Uniform in [0, 1) sample number `index` of a stream.
float uniform_at(PhiloxKey key, std::uint64_t index);

}  // namespace ptrain::runtime
