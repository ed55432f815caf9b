// One failure said once on the local launcher's terminal (engine/launch/repeated_errors.h).
#include "engine/launch/repeated_errors.h"

#include <catch2/catch.hpp>
#include <string>

using ptrain::dist::is_error_line;
using ptrain::dist::RepeatedErrors;

namespace {

std::string line(int rank, const std::string& subsystem, const std::string& level, const std::string& text) {
  return "2026-12-07T04:00:00.000Z [rank " + std::to_string(rank) + "/4 node3 local " + std::to_string(rank) +
         "] " + subsystem + " " + level + ": " + text;
}

}  // namespace

TEST_CASE("repeated errors: the log's error lines are told from the rest") {
  CHECK(is_error_line(line(1, "data", "error", "data: gone.bin: no such file")));
  CHECK(is_error_line(line(1, "comm", "error", "")));
  CHECK_FALSE(is_error_line(line(1, "train", "warning", "error: not at error level")));
  CHECK_FALSE(is_error_line(line(1, "train", "info", "x error: y")));
  CHECK_FALSE(is_error_line("step 4/10 | loss 4.2 error: none"));
  CHECK_FALSE(is_error_line("error: a line that is no log line"));
}

TEST_CASE("repeated errors: every rank's same error is shown once, the ranks named at the end") {
  RepeatedErrors repeated;
  const std::string error = "data: no/val.bin: expected at least one file matching this pattern, found none";
  CHECK(repeated.show(2, line(2, "data", "error", error)));
  CHECK(repeated.show(2, line(2, "data", "error", error)));  // its own lines all pass
  for (int rank : {0, 1, 3}) CHECK_FALSE(repeated.show(rank, line(rank, "data", "error", error)));
  CHECK(repeated.show(1, line(1, "train", "warning", "a warning passes")));
  CHECK(repeated.summary() ==
        "rank 2's error above was repeated by ranks 0-1, 3 (the same error, or their stopping because of "
        "it): not "
        "shown again; each rank's log file has its lines");
}

TEST_CASE("repeated errors: a rank stopping because of another's error is held back with its whole record") {
  RepeatedErrors repeated;
  const std::string error = "rank 1: data: val.bin: byte 1224: token id out of range";
  CHECK(repeated.show(1, line(1, "data", "error", "data: val.bin: byte 1224: token id out of range")));
  // rank 2's echo, a record of three lines, then a later record of its own that says something else
  const std::string head = "2026-12-07T04:00:01.000Z [rank 2/4 node3 local 2] comm error: ";
  CHECK_FALSE(repeated.show(2, head + "rank 2 stops: " + error));
  CHECK_FALSE(repeated.show(2, head + "rank 2's last collectives:"));
  CHECK_FALSE(repeated.show(2, head + "  #41 all_reduce dp 4096 bytes"));
  CHECK(repeated.show(2, line(2, "ckpt", "error", "checkpoint: cannot write step_8")));
  CHECK(repeated.summary().rfind(
            "rank 1's error above was repeated by rank 2 (the same error, or its stopping", 0) == 0);
}

TEST_CASE("repeated errors: different errors are all shown, and nothing is summed up") {
  RepeatedErrors repeated;
  CHECK(repeated.show(0, line(0, "comm", "error", "all_reduce timed out after 60 s")));
  CHECK(repeated.show(1, line(1, "comm", "error", "send to rank 0 failed: connection reset")));
  CHECK(repeated.summary().empty());
}
