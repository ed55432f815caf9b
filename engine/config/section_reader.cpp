#include "engine/config/section_reader.h"

#include <map>

#include "engine/config/suggest.h"
#include "engine/config/text.h"
#include "engine/config/value_reader.h"

namespace ptrain::config {
namespace {

// Key paths in diagnostics echo user text; a 4 MiB key must not become a 4 MiB message.
constexpr std::size_t kShownKeyChars = 80;

std::string where_in(const Section& section) {
  return section.path.empty() ? "at the top level" : cat("in ", section.path);
}

std::string parent_of(std::string_view path) {
  std::size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string() : std::string(path.substr(0, dot));
}

std::string unknown_key_fix(const Section& section, std::string_view name) {
  if (name == "<<")
    return "YAML merge keys are not supported; write the keys out, or alias a whole section "
           "(model: *base_model)";
  std::vector<std::string> names = entry_names(section);
  if (std::optional<std::string> close = closest_match(name, names))
    return cat("did you mean ", quoted(*close), "?");
  std::vector<std::string> elsewhere = paths_named(name);
  if (!elsewhere.empty()) {
    std::string parent = parent_of(elsewhere.front());
    return cat("did you mean ", quoted(elsewhere.front()), "? (", name, " belongs ",
               parent.empty() ? std::string("at the top level") : cat("in section ", parent), ")");
  }
  return cat("valid keys ", where_in(section), ": ", join(names));
}

}  // namespace

void report_unknown_key(LoadContext& ctx, const Section& section, std::string_view name,
                        const Location& where) {
  std::string path = printable(child_path(section.path, name), kShownKeyChars);
  ctx.report_error({path, where.line, where.column,
                    cat("unknown key ", quoted(printable(name, kShownKeyChars)), " ", where_in(section)),
                    unknown_key_fix(section, name), where.origin});
}

void read_entry(LoadContext& ctx, const SchemaEntry& entry, const std::string& path, const YAML::Node& value,
                const Source& source, const Location& key_location, int key_offset) {
  ctx.result().locations[path] = key_location;
  if (entry.section != nullptr) {
    read_section(ctx, *entry.section, value, source, key_location);
    return;
  }
  ValueReader reader(ctx, value, path, source, key_location, key_offset);
  entry.read(reader, ctx.spec());
}

void read_section(LoadContext& ctx, const Section& section, const YAML::Node& node, const Source& source,
                  const Location& where) {
  std::string section_path(section.path);
  if (node.IsNull()) {
    if (section.enter != nullptr) section.enter(ctx.spec(), false);
    return;
  }
  if (!node.IsMap()) {
    ctx.report_error({section_path, where.line, where.column,
                      cat("expected a mapping of ", section_path, " keys, got ", describe(node)),
                      cat("write ", section_path, ": followed by indented key: value lines (valid keys: ",
                          join(entry_names(section)), ")"),
                      where.origin});
    ctx.mark_bad(section_path);
    return;
  }
  if (section.enter != nullptr) section.enter(ctx.spec(), true);

  std::map<std::string, Location, std::less<>> seen;
  for (const auto& pair : node) {
    const YAML::Node& key_node = pair.first;
    Location key_location = source.at(key_node.Mark());
    if (!key_node.IsScalar()) {
      ctx.report_error({section_path, key_location.line, key_location.column,
                        cat("a key must be a plain name, got ", describe(key_node), " as a key"),
                        "write name: value", key_location.origin});
      continue;
    }
    const std::string& name = key_node.Scalar();
    std::string path = child_path(section.path, name);
    if (auto first = seen.find(name); first != seen.end()) {
      std::string first_at =
          first->second.line > 0 ? cat(" (first written at line ", first->second.line, ")") : "";
      ctx.report_error({printable(path, kShownKeyChars), key_location.line, key_location.column,
                        cat("duplicate key ", quoted(printable(name, kShownKeyChars)), first_at),
                        "keep one of them", key_location.origin});
      ctx.mark_bad(path);
      continue;
    }
    seen.emplace(name, key_location);
    const SchemaEntry* entry = find_entry(section, name);
    if (entry == nullptr) {
      report_unknown_key(ctx, section, name, key_location);
      continue;
    }
    read_entry(ctx, *entry, path, pair.second, source, key_location, key_node.Mark().pos);
  }
}

}  // namespace ptrain::config
