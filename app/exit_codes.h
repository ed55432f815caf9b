// Process exit codes (docs/commands.md): the contract scripts and launchers rely on.
#pragma once

namespace ptrain::app {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeFailure = 1;  // a rank died, NaN, I/O
inline constexpr int kExitBadInput = 2;        // config, files, flags

}  // namespace ptrain::app
