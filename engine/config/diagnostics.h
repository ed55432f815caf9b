// A user-facing problem with a job: which key, where in the YAML, what is wrong, how to fix it.
#pragma once

#include <string>
#include <vector>

namespace ptrain::config {

struct Diagnostic {
  std::string key;      // dotted key path, e.g. "parallel.tp"; empty for the document itself
  int line = 0;         // 1-based YAML line; 0 when the value came from --set or a default
  int column = 0;       // 1-based
  std::string message;  // what is wrong: expected vs got
  std::string fix;      // how to fix it (may be empty)
  std::string origin;   // "job.yaml", "--set parallel.tp=3", ...

  // "job.yaml:12:5: parallel.tp: message (fix: ...)"
  std::string format() const;
};

struct Diagnostics {
  std::vector<Diagnostic> errors;
  std::vector<Diagnostic> warnings;
  bool ok() const { return errors.empty(); }
};

}  // namespace ptrain::config
