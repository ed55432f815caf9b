// Walks a YAML mapping against a schema section: each key is looked up (unknown keys get a "did
// you mean"), repeated keys are errors (yaml-cpp 0.7 keeps both pairs and lookups see the first),
// every key's position is recorded, and each value goes to its typed reader.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

#include "engine/config/load_context.h"
#include "engine/config/schema.h"

namespace ptrain::config {

// `where` is the position of the section's key (or of the document for the root).
void read_section(LoadContext& ctx, const Section& section, const YAML::Node& node, const Source& source,
                  const Location& where);

// Reads `value` for `entry` at dotted `path`; `key_offset` is the key's byte offset in the file
// (-1 when unknown) so list elements can tell whether their own position is meaningful.
void read_entry(LoadContext& ctx, const SchemaEntry& entry, const std::string& path, const YAML::Node& value,
                const Source& source, const Location& key_location, int key_offset);

// "unknown key 'hiden' in model" with a did-you-mean (same section, or the section it belongs to).
void report_unknown_key(LoadContext& ctx, const Section& section, std::string_view name,
                        const Location& where);

}  // namespace ptrain::config
