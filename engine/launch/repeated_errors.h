// One failure, said once on the local launcher's terminal. When a rank fails, the others often say
// the same: every rank met the same bad input, or each stops because the first one did and repeats
// its words ("rank 2 stops: rank 1: <the error>", with its own collective log). The launcher shows
// the first error record of the job whole, and holds back another rank's error record that repeats
// it (the same first line, or one that quotes it), naming those ranks once at the end. Every rank's
// log file (logs/rank_<R>.log) keeps all of its own lines.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

namespace ptrain::dist {

// Whether `line` is a line of an error record as engine/log writes it:
// "<time> [<who>] <subsystem> error: <text>" (a record of several lines repeats the prefix).
bool is_error_line(const std::string& line);

class RepeatedErrors {
 public:
  // Whether `line`, written by rank `rank` to its stderr, goes to the terminal: false for the lines
  // of an error record of another rank than the first to report one that repeats that first record.
  bool show(int rank, const std::string& line);
  // "rank 1's error above was repeated by ranks 0, 2-3 ..." naming the ranks held back; empty if none.
  std::string summary() const;

 private:
  std::optional<int> first_rank_;       // the rank whose error record came first
  std::string first_message_;           // that record's first line, less the prefix
  std::map<int, std::string> holding_;  // rank -> the prefix of its record being held back
  std::set<int> repeated_;              // the ranks held back
};

}  // namespace ptrain::dist
