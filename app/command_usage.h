// What `ptrain` says when its command line names no command: bare `ptrain`, a misspelt command
// (`ptrain validat job.yaml`) or only flags. CLI11 alone said "A subcommand is required" and
// nothing else; this prints the usage and one line per command, and for a word that is no command
// the nearest one (docs/commands.md).
#pragma once

#include <CLI/CLI.hpp>

namespace ptrain::app {

// Called when parsing argv failed before any command was chosen (cli.get_subcommands() is empty)
// and the error is no --help/--version: prints on stderr what went wrong, the usage line and the
// commands of `cli`, each with its one-line summary; returns the exit code, kExitBadInput (a
// command line without a command is bad input, bare `ptrain` included).
int report_no_command(const CLI::App& cli, const CLI::ParseError& error, int argc, const char* const* argv);

}  // namespace ptrain::app
