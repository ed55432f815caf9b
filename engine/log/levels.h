// What PTRAIN_LOG_LEVEL asks for: a level for every subsystem's logger, like NCCL_DEBUG with
// NCCL_DEBUG_SUBSYS in one variable. The syntax is a comma-separated list whose items are a LEVEL
// (every subsystem) or SUBSYSTEM=LEVEL (that one), later items winning:
//   PTRAIN_LOG_LEVEL=debug              every subsystem at debug
//   PTRAIN_LOG_LEVEL=info,comm=debug    comm at debug, the others at info
//   PTRAIN_LOG_LEVEL=warn,train=info    only warnings and errors, but the trainer's notes too
// Levels: trace, debug, info, warn, error, off. Subsystems: launch, store, comm, train, ckpt, data,
// plan, kernels.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ptrain::log {

// One logger each; the names are what PTRAIN_LOG_LEVEL and every line say.
enum class Subsystem { launch, store, comm, train, ckpt, data, plan, kernels };
inline constexpr std::array<std::string_view, 8> kSubsystemNames = {"launch", "store", "comm", "train",
                                                                    "ckpt",   "data",  "plan", "kernels"};
inline constexpr std::size_t kSubsystems = kSubsystemNames.size();

// spdlog's levels, in its order (spdlog::level::level_enum has the same values).
enum class Level { trace, debug, info, warn, error, critical, off };

struct Levels {
  std::array<Level, kSubsystems> of;  // each subsystem's level, by Subsystem
  // PTRAIN_LOG_LEVEL was set: the terminal shows every rank's lines at these levels (unset, the
  // other ranks' terminal shows only their warnings and errors; see log.h).
  bool chosen = false;
  Levels() { of.fill(Level::info); }
  Level operator[](Subsystem s) const { return of[static_cast<std::size_t>(s)]; }
};

// A PTRAIN_LOG_LEVEL that does not parse: what is wrong and the values allowed.
class LevelError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// `text` in the syntax above (empty: the defaults); throws LevelError naming the item at fault and
// the allowed values ("PTRAIN_LOG_LEVEL='info,com=debug': 'com' is not a subsystem (launch, ...)").
Levels parse_levels(std::string_view text);

// The levels PTRAIN_LOG_LEVEL asks for (the defaults when it is unset or empty); throws LevelError.
Levels levels_from_env();

}  // namespace ptrain::log
