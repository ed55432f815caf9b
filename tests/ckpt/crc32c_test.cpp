#include "engine/ckpt/crc32c.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <string>
#include <vector>

using ptrain::ckpt::crc32c;
using ptrain::ckpt::crc32c_extend;

TEST_CASE("crc32c matches the published check values", "[ckpt][crc32c]") {
  const std::string check = "123456789";
  CHECK(crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(crc32c(nullptr, 0) == 0u);

  // RFC 3720 (iSCSI), appendix B.4.
  std::vector<unsigned char> bytes(32, 0x00);
  CHECK(crc32c(bytes.data(), bytes.size()) == 0x8A9136AAu);
  std::fill(bytes.begin(), bytes.end(), 0xFF);
  CHECK(crc32c(bytes.data(), bytes.size()) == 0x62A8AB43u);
  std::iota(bytes.begin(), bytes.end(), 0);
  CHECK(crc32c(bytes.data(), bytes.size()) == 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<unsigned char>(31 - i);
  CHECK(crc32c(bytes.data(), bytes.size()) == 0x113FDB5Cu);
}

TEST_CASE("crc32c can be computed piece by piece", "[ckpt][crc32c]") {
  std::vector<unsigned char> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>((i * 7919u) >> 3);
  const std::uint32_t whole = crc32c(data.data(), data.size());
  for (std::size_t split : {0u, 1u, 7u, 8u, 9u, 500u, 999u, 1000u}) {
    const std::uint32_t first = crc32c(data.data(), split);
    CHECK(crc32c_extend(first, data.data() + split, data.size() - split) == whole);
  }
  // Unaligned starts take the same path as aligned ones.
  CHECK(crc32c(data.data() + 3, 100) == crc32c_extend(crc32c(data.data() + 3, 50), data.data() + 53, 50));
}

TEST_CASE("crc32c: the hardware path and the table agree", "[ckpt][crc32c]") {
  std::vector<unsigned char> data(4099);
  std::uint32_t x = 1;
  for (auto& b : data) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 16);
  for (std::size_t start : {0u, 1u, 5u})
    for (std::size_t size : {0u, 1u, 7u, 8u, 15u, 64u, 1000u, 4090u}) {
      INFO("start " << start << " size " << size);
      CHECK(crc32c_extend(0x12345678u, data.data() + start, size) ==
            ptrain::ckpt::crc32c_extend_portable(0x12345678u, data.data() + start, size));
    }
  const std::string check = "123456789";
  CHECK(ptrain::ckpt::crc32c_extend_portable(0, check.data(), check.size()) == 0xE3069283u);
}

TEST_CASE("crc32c of two pieces combines into the whole's, in parallel too", "[ckpt][crc32c]") {
  std::vector<unsigned char> data(3000);
  std::uint32_t x = 7;
  for (auto& b : data) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 16);
  const std::uint32_t whole = crc32c(data.data(), data.size());
  for (std::size_t split : {0u, 1u, 2u, 3u, 8u, 255u, 256u, 1024u, 2999u, 3000u}) {
    INFO("split " << split);
    const std::uint32_t a = crc32c(data.data(), split), b = crc32c(data.data() + split, data.size() - split);
    CHECK(ptrain::ckpt::crc32c_combine(a, b, data.size() - split) == whole);
  }
  // Large enough for several pieces (8 MiB each), with a size no piece count divides.
  std::vector<unsigned char> big((std::size_t{8} << 20) * 3 + 12345);
  for (auto& b : big) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 16);
  CHECK(ptrain::ckpt::crc32c_parallel(big.data(), big.size()) == crc32c(big.data(), big.size()));
  CHECK(ptrain::ckpt::crc32c_parallel(data.data(), data.size()) == whole);
}
