// Message building for diagnostics. GCC 12 has no <format>, so: cat("tp = ", 8, ", lr = ", 3e-4).
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <vector>

namespace ptrain::config {

// Shortest text that reads back as the same double, in fixed notation for everyday magnitudes:
// 0.0003, 600, 1e-08, 1e+20.
std::string format_number(double value);

// 'word' with quotes, for naming keys and values inside messages.
std::string quoted(std::string_view word);

// "a, b, c" (or with any separator).
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

// User text shown inside a message: control bytes escaped as \xNN, long text cut (at a UTF-8
// character boundary) and marked with "...".
std::string printable(std::string_view text, std::size_t max_chars = 40);

namespace detail {
inline void append(std::string& out, std::string_view text) {
  out += text;
}
inline void append(std::string& out, char c) {
  out += c;
}
inline void append(std::string& out, double value) {
  out += format_number(value);
}
template <std::integral I>
requires(!std::same_as<I, char> && !std::same_as<I, bool>) void append(std::string& out, I value) {
  out += std::to_string(value);
}
}  // namespace detail

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (detail::append(out, parts), ...);
  return out;
}

}  // namespace ptrain::config
