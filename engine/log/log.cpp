#include "engine/log/log.h"

#include <unistd.h>

#include <array>
#include <memory>
#include <spdlog/pattern_formatter.h>
#include <vector>

#include "engine/log/line_sink.h"

namespace ptrain::log {
namespace {

// The level as a word, as compilers say it: "warning" and "error" stay findable in what people and
// tests grep for.
class LevelWord final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr std::array<std::string_view, 7> kWords = {"trace", "debug",    "info", "warning",
                                                               "error", "critical", "off"};
    const std::string_view word = kWords[static_cast<std::size_t>(msg.level)];
    dest.append(word.data(), word.data() + word.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<LevelWord>(); }
};

std::unique_ptr<spdlog::formatter> line_format(const Identity& who) {
  std::string tag;
  for (char c : who.tag()) tag += c == '%' ? std::string("%%") : std::string(1, c);
  auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc, std::string("\n"));
  f->add_flag<LevelWord>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%eZ " + tag + " %n %*: %v");
  return f;
}

spdlog::level::level_enum spd(Level level) { return static_cast<spdlog::level::level_enum>(level); }

// The lines logged before the file opens (how the process was launched, the job's warnings), at
// most this much: the file starts with them.
constexpr std::size_t kHeldBytes = 64 << 10;

struct Logs {
  std::array<std::shared_ptr<spdlog::logger>, kSubsystems> loggers;
  std::shared_ptr<LineSink> terminal = std::make_shared<LineSink>(STDERR_FILENO);
  std::shared_ptr<LineSink> file;
  std::shared_ptr<LineSink> held = std::make_shared<LineSink>(-1);  // until the file opens
  std::shared_ptr<std::string> held_text = std::make_shared<std::string>();
  Identity who;
  Levels levels;

  Logs() {
    for (std::size_t s = 0; s < kSubsystems; ++s)
      loggers[s] = std::make_shared<spdlog::logger>(std::string(kSubsystemNames[s]), terminal);
    who.host = host_name();
    held->route([text = held_text](std::string lines) {
      if (text->size() + lines.size() <= kHeldBytes) *text += lines;
    });
    apply();
  }

  void apply() {
    const bool shows_info = levels.chosen || !who.rank || *who.rank == 0;
    terminal->set_level(shows_info ? spdlog::level::trace : spdlog::level::warn);
    terminal->set_formatter(line_format(who));
    (file ? file : held)->set_formatter(line_format(who));
    for (std::size_t s = 0; s < kSubsystems; ++s) {
      loggers[s]->set_level(spd(levels.of[s]));
      // Errors are written at once anyway (LineSink holds nothing back); no flush policy to set.
      std::vector<spdlog::sink_ptr>& sinks = loggers[s]->sinks();
      sinks.assign({terminal, file ? file : held});
    }
  }
};

Logs& logs() {
  static Logs instance;
  return instance;
}

}  // namespace

std::string Identity::tag() const {
  if (rank)
    return "[rank " + std::to_string(*rank) + "/" + std::to_string(world) + " " + host + " local " +
           std::to_string(local_rank) + "]";
  return "[" + (role.empty() ? host : role + " " + host) + "]";
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

void set_levels(const Levels& levels) {
  logs().levels = levels;
  logs().apply();
}

void set_identity(const Identity& who) {
  logs().who = who;
  logs().apply();
}

void add_file(const std::string& path) {
  Logs& l = logs();
  l.file = LineSink::append_to(path);
  l.file->write_lines(*l.held_text);  // a second file (none in a run) has them too
  l.apply();
}

TerminalRoute::TerminalRoute(std::function<void(std::string)> write) { logs().terminal->route(std::move(write)); }

TerminalRoute::~TerminalRoute() { logs().terminal->route(nullptr); }

spdlog::logger& get(Subsystem s) { return *logs().loggers[static_cast<std::size_t>(s)]; }

}  // namespace ptrain::log
