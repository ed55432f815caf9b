#include "engine/config/overrides.h"

#include "engine/config/schema.h"
#include "engine/config/section_reader.h"
#include "engine/config/text.h"
#include "engine/config/yaml_document.h"

namespace ptrain::config {
namespace {

constexpr std::size_t kShownOverrideChars = 120;

std::string trimmed(std::string_view text) {
  std::size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  std::size_t end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

struct ResolvedPath {
  const SchemaEntry* entry = nullptr;
  std::vector<const Section*> sections;  // the sections walked through, below the root
  std::string path;
};

// Looks the dotted path up in the schema without touching the spec; reports what does not match.
std::optional<ResolvedPath> resolve_path(LoadContext& ctx, const std::string& path,
                                         const std::vector<std::string>& parts, const Location& where) {
  ResolvedPath resolved;
  const Section* section = &root_section();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) {
      ctx.report_error({printable(path, kShownOverrideChars), 0, 0, "a key path has an empty part",
                        "write dotted keys such as parallel.tp", where.origin});
      return std::nullopt;
    }
    const SchemaEntry* entry = find_entry(*section, parts[i]);
    if (entry == nullptr) {
      report_unknown_key(ctx, *section, parts[i], where);
      return std::nullopt;
    }
    resolved.entry = entry;
    resolved.path = child_path(section->path, parts[i]);
    bool has_more = i + 1 < parts.size();
    if (has_more && entry->section == nullptr) {
      ctx.report_error({resolved.path, 0, 0,
                        cat("is a value, not a section: it has no key ",
                            quoted(printable(parts[i + 1], kShownOverrideChars))),
                        cat("write --set ", resolved.path, "=<value>"), where.origin});
      return std::nullopt;
    }
    if (has_more) {
      section = entry->section;
      resolved.sections.push_back(section);
    }
  }
  return resolved;
}

void apply_override(LoadContext& ctx, const std::string& text) {
  Source source{cat("--set ", printable(text, kShownOverrideChars)), false};
  Location where{0, 0, source.origin};
  std::optional<Assignment> assignment = split_assignment(text);
  if (!assignment) {
    ctx.report_error({"", 0, 0, "expected key=value", "write e.g. --set parallel.tp=2", source.origin});
    return;
  }
  if (assignment->path.empty()) {
    ctx.report_error(
        {"", 0, 0, "the key before '=' is empty", "write e.g. --set parallel.tp=2", source.origin});
    return;
  }
  std::optional<ResolvedPath> resolved = resolve_path(ctx, assignment->path, assignment->keys, where);
  if (!resolved) return;
  std::optional<ParsedYaml> parsed = parse_yaml(ctx, assignment->value, source, resolved->path);
  if (!parsed) return;
  if (parsed->documents > 1) {
    ctx.report_error({resolved->path, 0, 0, "the value holds several YAML documents", "give a single value",
                      source.origin});
    return;
  }
  // Sections walked through come into being (model.moe.experts=4 creates model.moe) and point at
  // this --set unless the file wrote them.
  for (const Section* section : resolved->sections) {
    if (section->enter != nullptr) section->enter(ctx.spec(), true);
    ctx.result().locations.try_emplace(std::string(section->path), where);
  }
  read_entry(ctx, *resolved->entry, resolved->path, parsed->first, source, where, -1);
}

}  // namespace

std::optional<Assignment> split_assignment(std::string_view text) {
  std::size_t equals = text.find('=');
  if (equals == std::string_view::npos) return std::nullopt;
  Assignment a;
  a.path = trimmed(text.substr(0, equals));
  a.value = std::string(text.substr(equals + 1));
  std::size_t begin = 0;
  while (true) {
    std::size_t dot = a.path.find('.', begin);
    a.keys.push_back(a.path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin));
    if (dot == std::string::npos) return a;
    begin = dot + 1;
  }
}

void apply_overrides(LoadContext& ctx, const std::vector<std::string>& overrides) {
  for (const std::string& text : overrides) apply_override(ctx, text);
}

}  // namespace ptrain::config
