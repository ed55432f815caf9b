#include "engine/config/text.h"

#include <array>
#include <charconv>

namespace ptrain::config {

std::string format_number(double value) {
  // Fixed notation reads best for everyday magnitudes (0.0003, 600); exponents for the rest (1e-08).
  double magnitude = value < 0 ? -value : value;
  bool fixed = magnitude == 0 || (magnitude >= 1e-4 && magnitude < 1e15);
  std::array<char, 400> buffer{};
  auto [end, error] =
      fixed ? std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::fixed)
            : std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  if (error != std::errc{}) return "?";
  return std::string(buffer.data(), end);
}

std::string quoted(std::string_view word) {
  return cat("'", word, "'");
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::string printable(std::string_view text, std::size_t max_chars) {
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    auto byte = static_cast<unsigned char>(text[i]);
    bool continues_a_character = (byte & 0xc0) == 0x80;
    if (out.size() >= max_chars && !continues_a_character) {
      out += "...";
      break;
    }
    // The loader only sees valid UTF-8, so multi-byte characters pass through whole.
    if ((byte >= 0x20 && byte < 0x7f) || byte >= 0x80) {
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  return out;
}

}  // namespace ptrain::config
