#include "engine/config/text_checks.h"

#include <cstdint>

#include "engine/config/loader.h"
#include "engine/config/text.h"

namespace ptrain::config {
namespace {

constexpr std::string_view kBinaryFix = "a job spec is UTF-8 text; is this the right file?";

// Length of the well-formed UTF-8 sequence starting at text[i] (Unicode table 3-7), or 0.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return i + k < text.size() ? static_cast<std::uint8_t>(text[i + k]) : 0; };
  auto in = [](std::uint8_t b, std::uint8_t lo, std::uint8_t hi) { return b >= lo && b <= hi; };
  std::uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (in(b0, 0xc2, 0xdf)) return in(byte(1), 0x80, 0xbf) ? 2 : 0;
  if (b0 >= 0xe0 && b0 <= 0xef) {
    std::uint8_t lo = b0 == 0xe0 ? 0xa0 : 0x80;  // no overlong forms
    std::uint8_t hi = b0 == 0xed ? 0x9f : 0xbf;  // no surrogates
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xbf) ? 3 : 0;
  }
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    std::uint8_t lo = b0 == 0xf0 ? 0x90 : 0x80;
    std::uint8_t hi = b0 == 0xf4 ? 0x8f : 0xbf;  // nothing above U+10FFFF
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xbf) && in(byte(3), 0x80, 0xbf) ? 4 : 0;
  }
  return 0;
}

bool starts_with_utf16_or_32_bom(std::string_view text) {
  return text.starts_with("\xff\xfe") || text.starts_with("\xfe\xff") ||
         text.starts_with(std::string_view("\x00\x00\xfe\xff", 4));
}

bool is_allowed_control(unsigned char c) {
  return c == '\t' || c == '\n' || c == '\r';
}

}  // namespace

std::optional<TextProblem> find_text_problem(std::string_view text) {
  if (text.size() > kMaxJobBytes) {
    return TextProblem{cat("the text is ", text.size(), " bytes; the limit for a job spec is ", kMaxJobBytes,
                           " bytes (4 MiB)"),
                       std::string(kBinaryFix)};
  }
  if (starts_with_utf16_or_32_bom(text)) {
    return TextProblem{"the text is UTF-16 or UTF-32 (it starts with that byte-order mark)",
                       "save it as UTF-8", 1, 1};
  }
  int line = 1;
  int column = 1;
  for (std::size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && !is_allowed_control(c)) || c == 0x7f) {
      return TextProblem{cat("control byte ", printable(text.substr(i, 1)), " is not allowed in YAML"),
                         std::string(kBinaryFix), line, column};
    }
    std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      return TextProblem{"the text is not valid UTF-8", "save the file as UTF-8", line, column};
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += length;
  }
  return std::nullopt;
}

}  // namespace ptrain::config
