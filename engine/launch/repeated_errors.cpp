#include "engine/launch/repeated_errors.h"

#include <string_view>

namespace ptrain::dist {
namespace {

constexpr std::string_view kLevel = " error: ";

// The prefix of an error line, up to and including " error: " (the time, who, the subsystem);
// nothing for any other line.
std::optional<std::string> error_prefix(const std::string& line) {
  const std::size_t who = line.find(" [");
  if (who == std::string::npos || line.find(' ') != who) return std::nullopt;  // the time is the first word
  const std::size_t after = line.find("] ", who);
  if (after == std::string::npos) return std::nullopt;
  const std::size_t level = line.find(' ', after + 2);  // the subsystem is one word
  if (level == std::string::npos || line.compare(level, kLevel.size(), kLevel) != 0) return std::nullopt;
  return line.substr(0, level + kLevel.size());
}

// "0, 2-3, 5": ranks in order, runs joined.
std::string rank_list(const std::set<int>& ranks) {
  std::string text;
  for (auto it = ranks.begin(); it != ranks.end();) {
    const int first = *it;
    int last = first;
    for (++it; it != ranks.end() && *it == last + 1; ++it) last = *it;
    text +=
        (text.empty() ? "" : ", ") + std::to_string(first) + (last > first ? "-" + std::to_string(last) : "");
  }
  return text;
}

}  // namespace

bool is_error_line(const std::string& line) {
  return error_prefix(line).has_value();
}

bool RepeatedErrors::show(int rank, const std::string& line) {
  const std::optional<std::string> prefix = error_prefix(line);
  if (const auto held = holding_.find(rank); held != holding_.end()) {
    if (prefix == held->second) return false;  // the rest of a record held back
    holding_.erase(held);
  }
  if (!prefix) return true;
  const std::string message = line.substr(prefix->size());
  if (!first_rank_) {
    first_rank_ = rank;
    first_message_ = message;
    return true;
  }
  if (rank == *first_rank_ || first_message_.empty() || message.find(first_message_) == std::string::npos)
    return true;
  holding_[rank] = *prefix;
  repeated_.insert(rank);
  return false;
}

std::string RepeatedErrors::summary() const {
  if (repeated_.empty()) return "";
  const bool one = repeated_.size() == 1;
  return "rank " + std::to_string(*first_rank_) + "'s error above was repeated by rank" + (one ? " " : "s ") +
         rank_list(repeated_) + " (the same error, or " + (one ? "its" : "their") +
         " stopping because of it): not shown again; each rank's log file has its lines";
}

}  // namespace ptrain::dist
