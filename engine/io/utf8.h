// UTF-8 well-formedness (Unicode table 3-7: no overlong forms, no surrogates, nothing above
// U+10FFFF), for every reader and writer of text that must be UTF-8: job files, JSON manifests,
// JSON reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ptrain::io {

// Length of the well-formed UTF-8 sequence starting at text[i], or 0 if there is none there.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i);

// Byte offset of the first byte that is not part of a well-formed sequence, or -1 when all are.
std::int64_t invalid_utf8_offset(std::string_view text);

}  // namespace ptrain::io
