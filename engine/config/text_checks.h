// Checks on raw job text before it reaches the YAML parser: size, encoding, binary bytes. yaml-cpp
// accepts invalid UTF-8 and control bytes silently; we want a clear message instead.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ptrain::config {

struct TextProblem {
  std::string message;
  std::string fix;
  int line = 0;  // 1-based position of the offending byte; 0 for whole-text problems
  int column = 0;
};

std::optional<TextProblem> find_text_problem(std::string_view text);

}  // namespace ptrain::config
