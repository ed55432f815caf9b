#include "engine/config/yaml_edit.h"

#include <yaml-cpp/yaml.h>

#include "engine/config/overrides.h"

namespace ptrain::config {

std::string yaml_with_values(const std::string& yaml_text, const std::vector<std::string>& assignments) {
  YAML::Node root = YAML::Load(yaml_text);
  for (const std::string& text : assignments) {
    const Assignment a = *split_assignment(text);
    // Nodes are handles into the document: `section` walks down, edits land in `root`.
    YAML::Node section = root;
    for (std::size_t i = 0; i + 1 < a.keys.size(); ++i) {
      if (!section[a.keys[i]].IsMap()) section[a.keys[i]] = YAML::Node(YAML::NodeType::Map);
      section.reset(section[a.keys[i]]);
    }
    const YAML::Node value = YAML::Load(a.value);
    if (value.IsNull()) {
      section.remove(a.keys.back());
    } else {
      section[a.keys.back()] = value;
    }
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace ptrain::config
