// One function per command; each registers its subcommand and flags on the CLI and, when chosen,
// stores its exit code in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace ptrain::app {

inline constexpr const char* kVersion = "ptrain 0.1.0";  // --version, and what a profile records

void add_validate_command(CLI::App& cli, int& exit_code);
void add_schedule_command(CLI::App& cli, int& exit_code);
void add_plan_command(CLI::App& cli, int& exit_code);
void add_run_command(CLI::App& cli, int& exit_code);
// First thing in main for `ptrain run`: the stop signals wait from then on (run_training says why),
// rather than from when the command line is parsed: SIGTERM in a run's first milliseconds killed it.
void hold_stop_signals_for_run(int argc, char** argv);
void add_convert_command(CLI::App& cli, int& exit_code);
void add_profile_command(CLI::App& cli, int& exit_code);
void add_report_command(CLI::App& cli, int& exit_code);

}  // namespace ptrain::app
