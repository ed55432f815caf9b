#include "engine/ckpt/crc32c.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <vector>

namespace ptrain::ckpt {
namespace {

static_assert(std::endian::native == std::endian::little, "slicing-by-8 below reads words little-endian");

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reversed

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

// tables[0] is the classic byte-at-a-time table; tables[k][b] advances tables[k-1][b] by one more
// zero byte, so eight bytes can be folded in with eight independent lookups.
constexpr Tables make_tables() {
  Tables t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][b] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}

constexpr Tables kTables = make_tables();

std::uint32_t load_u32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#if defined(__x86_64__)
// The SSE4.2 crc32 instruction implements exactly this polynomial, eight bytes at a time.
__attribute__((target("sse4.2"))) std::uint32_t crc32c_extend_sse42(std::uint32_t crc, const void* data,
                                                                    std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t c = ~crc;
  for (; size >= 8; p += 8, size -= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, sizeof word);
    c = __builtin_ia32_crc32di(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; size > 0; ++p, --size) c32 = __builtin_ia32_crc32qi(c32, *p);
  return ~c32;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

// A linear map of CRC registers over GF(2), as its columns: column n is the image of bit n.
using Gf2Matrix = std::array<std::uint32_t, 32>;

std::uint32_t apply(const Gf2Matrix& m, std::uint32_t v) {
  std::uint32_t out = 0;
  for (std::size_t n = 0; v != 0; ++n, v >>= 1)
    if ((v & 1u) != 0) out ^= m[n];
  return out;
}

Gf2Matrix compose(const Gf2Matrix& a, const Gf2Matrix& b) {  // a after b
  Gf2Matrix c{};
  for (std::size_t n = 0; n < 32; ++n) c[n] = apply(a, b[n]);
  return c;
}

// The register after one more zero byte: eight times, shifted right one bit with the polynomial
// folded in where the bit shifted out was set.
Gf2Matrix one_zero_byte() {
  Gf2Matrix bit{};
  bit[0] = kPolynomial;
  for (std::size_t n = 1; n < 32; ++n) bit[n] = 1u << (n - 1);
  const Gf2Matrix two = compose(bit, bit), four = compose(two, two);
  return compose(four, four);
}

// Pieces of at least this many bytes go to a core of their own.
constexpr std::size_t kParallelPiece = std::size_t{8} << 20;

}  // namespace

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::size_t size_b) {
  Gf2Matrix zeros = one_zero_byte();  // then 2, 4, 8, ... zero bytes
  for (std::size_t n = size_b; n != 0; n >>= 1) {
    if ((n & 1u) != 0) crc_a = apply(zeros, crc_a);
    if (n > 1) zeros = compose(zeros, zeros);
  }
  return crc_a ^ crc_b;
}

std::uint32_t crc32c_parallel(const void* data, std::size_t size) {
  const auto pieces = static_cast<std::int64_t>(
      std::min<std::size_t>(static_cast<std::size_t>(std::max(omp_get_max_threads(), 1)), size / kParallelPiece));
  if (pieces < 2) return crc32c(data, size);
  const auto* bytes = static_cast<const unsigned char*>(data);
  const std::size_t piece = size / static_cast<std::size_t>(pieces);
  const auto begin = [&](std::int64_t i) { return static_cast<std::size_t>(i) * piece; };
  const auto end = [&](std::int64_t i) { return i + 1 == pieces ? size : begin(i + 1); };
  std::vector<std::uint32_t> crcs(static_cast<std::size_t>(pieces));
#pragma omp parallel for schedule(static, 1)
  for (std::int64_t i = 0; i < pieces; ++i)
    crcs[static_cast<std::size_t>(i)] = crc32c(bytes + begin(i), end(i) - begin(i));
  std::uint32_t crc = crcs[0];
  for (std::int64_t i = 1; i < pieces; ++i) crc = crc32c_combine(crc, crcs[static_cast<std::size_t>(i)], end(i) - begin(i));
  return crc;
}

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size) {
#if defined(__x86_64__)
  if (kHaveSse42) return crc32c_extend_sse42(crc, data, size);
#endif
  return crc32c_extend_portable(crc, data, size);
}

std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  const auto& t = kTables;
  while (size >= 8) {
    const std::uint32_t lo = load_u32(p) ^ c;
    const std::uint32_t hi = load_u32(p + 4);
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^  //
        t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return ~c;
}

std::string crc32c_hex(std::uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

bool parse_crc32c_hex(const std::string& text, std::uint32_t& out) {
  if (text.size() != 8) return false;
  std::uint32_t v = 0;
  for (char c : text) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return false;
    v = (v << 4) | static_cast<std::uint32_t>(digit);
  }
  out = v;
  return true;
}

}  // namespace ptrain::ckpt
