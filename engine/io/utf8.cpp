#include "engine/io/utf8.h"

namespace ptrain::io {

std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return i + k < text.size() ? static_cast<std::uint8_t>(text[i + k]) : 0; };
  auto in = [](std::uint8_t b, std::uint8_t lo, std::uint8_t hi) { return b >= lo && b <= hi; };
  const std::uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (in(b0, 0xc2, 0xdf)) return in(byte(1), 0x80, 0xbf) ? 2 : 0;
  if (in(b0, 0xe0, 0xef)) {
    const std::uint8_t lo = b0 == 0xe0 ? 0xa0 : 0x80;  // no overlong forms
    const std::uint8_t hi = b0 == 0xed ? 0x9f : 0xbf;  // no surrogates
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xbf) ? 3 : 0;
  }
  if (in(b0, 0xf0, 0xf4)) {
    const std::uint8_t lo = b0 == 0xf0 ? 0x90 : 0x80;
    const std::uint8_t hi = b0 == 0xf4 ? 0x8f : 0xbf;  // nothing above U+10FFFF
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xbf) && in(byte(3), 0x80, 0xbf) ? 4 : 0;
  }
  return 0;
}

std::int64_t invalid_utf8_offset(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = utf8_sequence_length(text, i);
    if (len == 0) return static_cast<std::int64_t>(i);
    i += len;
  }
  return -1;
}

}  // namespace ptrain::io
