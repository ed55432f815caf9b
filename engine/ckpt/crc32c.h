// CRC32C (Castagnoli, reflected polynomial 0x82F63B78, as in iSCSI, ext4 and Google's crc32c):
// the checksum of every checkpoint rank file. Table-driven, slicing by 8 bytes (~1 GB/s); on x86-64
// CPUs with SSE4.2 the crc32 instruction computes the same values several times faster.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ptrain::ckpt {

// The CRC32C of `prefix || data` given crc = CRC32C(prefix) (0 for an empty prefix), so a file can
// be checksummed piece by piece as it is written.
std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size);

// The table-driven implementation alone (tests compare it with the hardware path).
std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t size);

inline std::uint32_t crc32c(const void* data, std::size_t size) {
  return crc32c_extend(0, data, size);
}

// The CRC32C of `a || b` from crc_a = CRC32C(a), crc_b = CRC32C(b) and b's size: crc_a shifted
// through size_b zero bytes (a linear map over GF(2), raised to size_b by squaring), xor crc_b.
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::size_t size_b);

// crc32c(data, size) computed in pieces on every core and combined: what checks a checkpoint's
// files on resume, where reading a memory-mapped file page by page is the time.
std::uint32_t crc32c_parallel(const void* data, std::size_t size);

// A CRC as checkpoint files record it: 8 lowercase hex digits.
std::string crc32c_hex(std::uint32_t crc);
// Reads 8 hex digits (either case) into `out`; false for anything else.
bool parse_crc32c_hex(const std::string& text, std::uint32_t& out);

}  // namespace ptrain::ckpt
