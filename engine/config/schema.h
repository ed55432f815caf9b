// The job spec's key tree: every section and key of the job file (docs/config.md),
// and the reader that stores each value into JobSpec. This is the one place that maps YAML keys onto JobSpec fields; the YAML walk
// and --set overrides both go through it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/job_spec.h"

namespace ptrain::config {

class ValueReader;
struct Section;

using LeafReader = void (*)(ValueReader&, JobSpec&);

struct SchemaEntry {
  std::string_view name;
  LeafReader read = nullptr;         // set for a value
  const Section* section = nullptr;  // set for a nested section
};

struct Section {
  std::string_view path;  // dotted path; "" for the document root
  std::span<const SchemaEntry> entries;
  // Called before the section's keys are read (present = true) or when the section is given as
  // null (present = false); model.moe uses it to engage or clear its optional.
  void (*enter)(JobSpec&, bool present) = nullptr;
};

const Section& root_section();
const SchemaEntry* find_entry(const Section& section, std::string_view name);
std::vector<std::string> entry_names(const Section& section);
// Every dotted path whose last part is `name` ("tp" -> {"parallel.tp"}), for keys written in the
// wrong section.
std::vector<std::string> paths_named(std::string_view name);
std::string child_path(std::string_view parent, std::string_view name);

}  // namespace ptrain::config
