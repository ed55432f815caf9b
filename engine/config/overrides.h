// --set key=value: the value is parsed as YAML (so `optimizer.betas=[0.9,0.99]` and
// `optimizer={lr: 1e-3}` work) and read through the same schema and readers as the file.
// Diagnostics carry origin "--set key=value" and line 0.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/load_context.h"

namespace ptrain::config {

// "parallel.tp = 2" -> keys {"parallel", "tp"}, value "2" (the key path trimmed, parts possibly
// empty); nothing when there is no '='.
struct Assignment {
  std::string path;               // "parallel.tp"
  std::vector<std::string> keys;  // the path's dot-separated parts
  std::string value;              // the text after the first '=', as written
};
std::optional<Assignment> split_assignment(std::string_view text);

// Applies the overrides in order on top of ctx.spec(); a later one wins.
void apply_overrides(LoadContext& ctx, const std::vector<std::string>& overrides);

}  // namespace ptrain::config
