// Text -> yaml-cpp documents, with every way that can fail (bad text, syntax, too deep) turned into
// a diagnostic. yaml-cpp's parser guards its own recursion depth, and its node graph shares
// aliased nodes instead of copying them, so neither deep nesting nor alias bombs blow up here;
// the readers never recurse deeper than the schema, so they do not either.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <string_view>

#include "engine/config/load_context.h"

namespace ptrain::config {

struct ParsedYaml {
  YAML::Node first;            // the first document (null when there is none)
  std::size_t documents = 0;   // how many documents the text holds
  YAML::Mark second_document;  // where the second one starts, when there is one
};

// The text's first document and the document count, or std::nullopt after reporting (under `key`)
// why the text cannot be used.
std::optional<ParsedYaml> parse_yaml(LoadContext& ctx, std::string_view text, const Source& source,
                                     const std::string& key);

// Reads the job file's single document into ctx.spec(). False when there is nothing usable to
// run the cross-field rules on (unparsable, empty, or not a mapping).
bool read_document(LoadContext& ctx, std::string_view text, const Source& source);

}  // namespace ptrain::config
