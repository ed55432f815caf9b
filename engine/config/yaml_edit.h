// A job's YAML with values set, for files ptrain writes from a job (`ptrain plan`'s best layout):
// the user's document with the given keys replaced or added, everything else as it was read.
// yaml-cpp does not keep comments, so the result has none; flow and block styles are kept.
#pragma once

#include <string>
#include <vector>

namespace ptrain::config {

// `assignments` are "dotted.key=value" as for --set, applied in order; a value is parsed as YAML
// ("[1, 2]" is a list; null removes the key). Precondition: the text and every assignment loaded
// without errors (load_string with the assignments as overrides), so nothing here can fail.
std::string yaml_with_values(const std::string& yaml_text, const std::vector<std::string>& assignments);

}  // namespace ptrain::config
