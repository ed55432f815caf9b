#include "engine/config/diagnostics.h"

namespace ptrain::config {

std::string Diagnostic::format() const {
  std::string where = origin;
  if (line > 0) where += ':' + std::to_string(line) + ':' + std::to_string(column);
  std::string out;
  if (!where.empty()) out += where + ": ";
  if (!key.empty()) out += key + ": ";
  out += message;
  if (!fix.empty()) out += " (fix: " + fix + ")";
  return out;
}

}  // namespace ptrain::config
