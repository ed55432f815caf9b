#include "engine/config/text_checks.h"

#include <cstdint>

#include "engine/config/loader.h"
#include "engine/config/text.h"
#include "engine/io/utf8.h"

namespace ptrain::config {
namespace {

constexpr std::string_view kBinaryFix = "a job spec is UTF-8 text; is this the right file?";

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
    std::size_t length = io::utf8_sequence_length(text, i);
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
