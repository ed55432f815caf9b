#include "app/command_usage.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/exit_codes.h"
#include "engine/config/suggest.h"

namespace ptrain::app {
namespace {

// One line per command; each command's --help has the rest. A command not listed here shows the
// first line of its description.
constexpr std::pair<std::string_view, std::string_view> kSummaries[] = {
    {"run", "train a job: one worker per rank here, or one rank under srun, mpirun or torchrun"},
    {"validate", "dry run: the rules, rank grid, memory per rank, communication, bubble, step time, MFU"},
    {"plan", "search the layouts for N GPUs and write the fastest that fits as a job file"},
    {"schedule", "draw the pipeline schedule the engine executes (terminal, SVG, Chrome trace)"},
    {"convert", "ptrain checkpoints <-> Hugging Face safetensors"},
    {"profile", "measure this machine's kernels and collectives into a hardware profile"},
    {"report", "one HTML page of a run: curves, throughput, memory and step time against predictions"},
};

std::string summary_of(const CLI::App& command) {
  for (const auto& [name, summary] : kSummaries)
    if (name == command.get_name()) return std::string(summary);
  const std::string description = command.get_description();
  return description.substr(0, description.find('\n'));
}

std::string usage(const std::vector<const CLI::App*>& commands) {
  std::size_t width = 0;
  for (const CLI::App* c : commands) width = std::max(width, c->get_name().size());
  std::string text =
      "usage: ptrain <command> [arguments]   (`ptrain <command> --help` for its flags)\ncommands:\n";
  for (const CLI::App* c : commands) {
    std::string name = c->get_name();
    name.resize(width, ' ');
    text += "  " + name + "  " + summary_of(*c) + "\n";
  }
  return text;
}

// The command the user most likely meant by `word`: the closest name within a typo's distance
// (config::closest_match, as for misspelt keys), else the one command `word` begins.
std::optional<std::string> nearest_command(const std::string& word, const std::vector<std::string>& names) {
  if (std::optional<std::string> close = config::closest_match(word, names)) return close;
  std::optional<std::string> begun;
  for (const std::string& name : names) {
    if (!name.starts_with(word)) continue;
    if (begun) return std::nullopt;  // more than one: no guess
    begun = name;
  }
  return begun;
}

}  // namespace

int report_no_command(const CLI::App& cli, const CLI::ParseError& error, int argc, const char* const* argv) {
  const std::vector<const CLI::App*> commands = cli.get_subcommands(std::function<bool(const CLI::App*)>());
  std::vector<std::string> names;
  for (const CLI::App* c : commands) names.push_back(c->get_name());
  // The first word that is no flag is where a command belongs (ptrain's own flags take no value).
  std::optional<std::string> word;
  for (int i = 1; i < argc && !word; ++i)
    if (argv[i][0] != '-') word = argv[i];
  if (word && std::find(names.begin(), names.end(), *word) == names.end()) {
    const std::optional<std::string> meant = nearest_command(*word, names);
    std::fprintf(stderr, "error: '%s' is not a ptrain command%s\n", word->c_str(),
                 meant ? ("; did you mean '" + *meant + "'?").c_str() : "");
  } else if (argc > 1) {
    std::fprintf(stderr, "error: %s\n", error.what());
  }
  std::fputs(usage(commands).c_str(), stderr);
  return kExitBadInput;
}

}  // namespace ptrain::app
