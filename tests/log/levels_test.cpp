// PTRAIN_LOG_LEVEL's syntax: a level for all, SUBSYSTEM=LEVEL for one, later items winning, and
// every mistake refused naming the item and the values allowed.
#include <catch2/catch.hpp>

#include "engine/log/levels.h"

using namespace ptrain::log;
using Catch::Contains;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_levels(text);
  } catch (const LevelError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("unset, every subsystem is at info and nothing was chosen", "[log][levels]") {
  for (const char* text : {"", "  "}) {
    const Levels levels = parse_levels(text);
    CHECK_FALSE(levels.chosen);
    for (Level l : levels.of) CHECK(l == Level::info);
  }
}

TEST_CASE("a level alone sets every subsystem", "[log][levels]") {
  const std::pair<const char*, Level> cases[] = {{"trace", Level::trace}, {"debug", Level::debug},
                                                 {"info", Level::info},   {"warn", Level::warn},
                                                 {"error", Level::error}, {"off", Level::off}};
  for (const auto& [text, level] : cases) {
    const Levels levels = parse_levels(text);
    CHECK(levels.chosen);
    for (Level l : levels.of) CHECK(l == level);
  }
}

TEST_CASE("SUBSYSTEM=LEVEL sets that one, and later items win", "[log][levels]") {
  const Levels levels = parse_levels("warn, comm=debug ,train = trace,launch=error,warn,store=off");
  CHECK(levels[Subsystem::comm] == Level::warn);  // the second bare "warn" set every subsystem again
  CHECK(levels[Subsystem::store] == Level::off);
  CHECK(levels[Subsystem::train] == Level::warn);

  const Levels some = parse_levels("info,comm=debug,kernels=warn");
  CHECK(some[Subsystem::comm] == Level::debug);
  CHECK(some[Subsystem::kernels] == Level::warn);
  for (Subsystem s : {Subsystem::launch, Subsystem::store, Subsystem::train, Subsystem::ckpt, Subsystem::data,
                      Subsystem::plan})
    CHECK(some[s] == Level::info);
  CHECK(parse_levels("comm=debug")[Subsystem::train] == Level::info);  // the others keep the default
}

TEST_CASE("a bad value names the item and what is allowed", "[log][levels]") {
  CHECK_THAT(error_of("verbose"), Contains("PTRAIN_LOG_LEVEL='verbose': 'verbose' is not a level "
                                           "(trace, debug, info, warn, error, off)"));
  CHECK_THAT(error_of("INFO"), Contains("'INFO' is not a level"));
  CHECK_THAT(error_of("info,com=debug"),
             Contains("'com' is not a subsystem (launch, store, comm, train, ckpt, data, plan, kernels)"));
  CHECK_THAT(error_of("comm=loud"), Contains("'loud' is not a level"));
  CHECK_THAT(error_of("comm="), Contains("'' is not a level"));
  CHECK_THAT(error_of("info,,comm=debug"), Contains("an empty item"));
  CHECK_THAT(error_of("info,"), Contains("an empty item"));
  CHECK_THAT(error_of("=debug"), Contains("'' is not a subsystem"));
}
