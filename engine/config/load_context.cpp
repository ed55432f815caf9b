#include "engine/config/load_context.h"

#include "engine/config/text.h"

namespace ptrain::config {

Location Source::at(const YAML::Mark& mark) const {
  if (!has_positions || mark.is_null()) return {0, 0, origin};
  return {mark.line + 1, mark.column + 1, origin};
}

void LoadContext::report_error(Diagnostic diagnostic) {
  if (result_.diags.errors.size() >= kMaxErrors) {
    ++dropped_errors_;
    return;
  }
  result_.diags.errors.push_back(std::move(diagnostic));
}

void LoadContext::report_warning(Diagnostic diagnostic) {
  if (result_.diags.warnings.size() >= kMaxErrors) return;
  result_.diags.warnings.push_back(std::move(diagnostic));
}

void LoadContext::error(const std::string& key, std::string message, std::string fix) {
  report_error(result_.at(key, std::move(message), std::move(fix)));
}

void LoadContext::warning(const std::string& key, std::string message, std::string fix) {
  report_warning(result_.at(key, std::move(message), std::move(fix)));
}

void LoadContext::mark_bad(std::string key) {
  bad_keys_.insert(std::move(key));
}

bool LoadContext::any_bad(std::initializer_list<std::string_view> keys) const {
  for (std::string_view key : keys) {
    // "model.moe.experts" is also bad when "model.moe" or "model" was rejected as a whole.
    for (std::size_t end = 0; end != std::string_view::npos;) {
      end = key.find('.', end + 1);
      if (bad_keys_.count(key.substr(0, end)) > 0) return true;
    }
  }
  return false;
}

void LoadContext::finish() {
  if (dropped_errors_ == 0) return;
  result_.diags.errors.push_back({"", 0, 0, cat(dropped_errors_, " more errors not shown"),
                                  "fix the errors above first", result_.origin});
}

}  // namespace ptrain::config
