#include "engine/config/loader.h"

#include <cerrno>
#include <filesystem>
#include <new>
#include <optional>
#include <system_error>

#include "engine/config/load_context.h"
#include "engine/config/overrides.h"
#include "engine/config/rules.h"
#include "engine/config/text.h"
#include "engine/config/yaml_document.h"
#include "engine/io/input_file.h"

namespace ptrain::config {
namespace {

// The key whose written position stands in for `key`: "a.b[3]" -> "a.b", "a.b" -> "a".
std::string enclosing_key(const std::string& key) {
  std::size_t cut = key.find_last_of(".[");
  return cut == std::string::npos ? std::string() : key.substr(0, cut);
}

void apply_rules(LoadContext& ctx, std::optional<int> world) {
  resolve_parallel(ctx, world);
  resolve_model(ctx);
  resolve_experts(ctx);
  resolve_schedule(ctx);
  check_training(ctx);
}

void load_into(LoadResult& result, const std::string& yaml_text, const LoadOptions& opts) {
  LoadContext ctx(result);
  bool document_read = read_document(ctx, yaml_text, Source{result.origin, true});
  apply_overrides(ctx, opts.overrides);
  // Rules on a document that could not be read would only restate that it could not be read.
  if (document_read && opts.derive) apply_rules(ctx, opts.world);
  ctx.finish();
}

Diagnostic file_problem(const std::string& path, std::string message, std::string fix) {
  return {"", 0, 0, std::move(message), std::move(fix), path};
}

}  // namespace

Diagnostic LoadResult::at(const std::string& key, std::string message, std::string fix) const {
  Diagnostic diagnostic{key, 0, 0, std::move(message), std::move(fix), origin};
  for (std::string written = key; !written.empty(); written = enclosing_key(written)) {
    auto found = locations.find(written);
    if (found == locations.end()) continue;
    diagnostic.line = found->second.line;
    diagnostic.column = found->second.column;
    diagnostic.origin = found->second.origin;
    break;
  }
  return diagnostic;
}

LoadResult load_string(const std::string& yaml_text, const std::string& origin, const LoadOptions& opts) {
  LoadResult result;
  result.origin = origin;
  try {
    load_into(result, yaml_text, opts);
  } catch (const std::bad_alloc&) {
    result.diags.errors.push_back(file_problem(origin, "out of memory while loading the job", ""));
  } catch (const std::exception& e) {
    result.diags.errors.push_back(
        file_problem(origin, cat("internal error while loading the job: ", e.what()), "please report this"));
  } catch (...) {
    result.diags.errors.push_back(
        file_problem(origin, "internal error while loading the job", "please report this"));
  }
  return result;
}

LoadResult rederive(const LoadResult& job, JobSpec changed) {
  LoadResult result;
  result.origin = job.origin;
  result.locations = job.locations;
  const int world = changed.world;
  result.spec = std::move(changed);
  LoadContext ctx(result);
  apply_rules(ctx, world);
  ctx.finish();
  return result;
}

std::optional<std::string> read_job_file(const std::string& path, Diagnostics& diags) {
  auto fail = [&](std::string message, std::string fix) {
    diags.errors.push_back(file_problem(path, std::move(message), std::move(fix)));
    return std::nullopt;
  };
  try {
    std::error_code error;
    if (std::filesystem::is_directory(path, error))
      return fail("is a directory, not a job file", "pass the YAML file");
    // A named pipe or a device is refused by io::InputFile without waiting on it.
    std::optional<io::InputFile> file;
    try {
      file.emplace(path);
    } catch (const io::FileError& e) {
      if (e.error_number() == ENOENT) return fail("the job file does not exist", "check the path");
      if (e.error_number() == EACCES)
        return fail("the job file cannot be read (check its permissions)", "check the path");
      return fail(cat("the job file cannot be read: ", e.detail()), "pass the YAML file");
    }
    const auto too_large = [&] {
      return fail(cat("the job file is larger than ", kMaxJobBytes, " bytes (4 MiB)"), "is this the right file?");
    };
    if (file->size() > static_cast<std::int64_t>(kMaxJobBytes)) return too_large();
    std::string text = file->read_all();
    if (text.size() > kMaxJobBytes) return too_large();  // it grew since it was opened
    return text;
  } catch (const std::exception& e) {
    return fail(cat("reading the job file failed: ", e.what()), "");
  } catch (...) {
    return fail("reading the job file failed", "");
  }
}

LoadResult load_file(const std::string& path, const LoadOptions& opts) {
  LoadResult failed;
  failed.origin = path;
  std::optional<std::string> text = read_job_file(path, failed.diags);
  return text ? load_string(*text, path, opts) : failed;
}

}  // namespace ptrain::config
