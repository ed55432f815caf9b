#include "engine/log/levels.h"

#include <cstdlib>

namespace ptrain::log {
namespace {

constexpr std::array<std::string_view, 6> kLevelNames = {"trace", "debug", "info", "warn", "error", "off"};
constexpr std::array<Level, 6> kLevelValues = {Level::trace, Level::debug, Level::info,
                                               Level::warn,  Level::error, Level::off};

template <std::size_t N>
std::string listed(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Levels parse_levels(std::string_view text) {
  Levels levels;
  const std::string whole(text);
  auto fail = [&](const std::string& why) -> LevelError {
    return LevelError("PTRAIN_LOG_LEVEL='" + whole + "': " + why);
  };
  auto level_of = [&](std::string_view name) {
    for (std::size_t i = 0; i < kLevelNames.size(); ++i)
      if (kLevelNames[i] == name) return kLevelValues[i];
    throw fail("'" + std::string(name) + "' is not a level (" + listed(kLevelNames) + ")");
  };
  if (trimmed(text).empty()) return levels;
  levels.chosen = true;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trimmed(text.substr(0, comma));
    if (item.empty())
      throw fail("an empty item; write LEVEL or SUBSYSTEM=LEVEL, separated by commas (e.g. info,comm=debug)");
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      levels.of.fill(level_of(item));
    } else {
      const std::string_view name = trimmed(item.substr(0, eq));
      std::size_t s = 0;
      while (s < kSubsystems && kSubsystemNames[s] != name) ++s;
      if (s == kSubsystems)
        throw fail("'" + std::string(name) + "' is not a subsystem (" + listed(kSubsystemNames) + ")");
      levels.of[s] = level_of(trimmed(item.substr(eq + 1)));
    }
    if (comma == std::string_view::npos) return levels;
    text.remove_prefix(comma + 1);
  }
}

Levels levels_from_env() {
  const char* text = std::getenv("PTRAIN_LOG_LEVEL");
  return parse_levels(text != nullptr ? text : "");
}

}  // namespace ptrain::log
