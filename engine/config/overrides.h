// --set key=value: the value is parsed as YAML (so `optimizer.betas=[0.9,0.99]` and
// `optimizer={lr: 1e-3}` work) and read through the same schema and readers as the file.
// Diagnostics carry origin "--set key=value" and line 0.
#pragma once

#include <string>
#include <vector>

#include "engine/config/load_context.h"

namespace ptrain::config {

// Applies the overrides in order on top of ctx.spec(); a later one wins.
void apply_overrides(LoadContext& ctx, const std::vector<std::string>& overrides);

}  // namespace ptrain::config
