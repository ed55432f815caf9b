#include "engine/ckpt/manifest.h"

#include <filesystem>
#include <stdexcept>
#include <string_view>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/crc32c.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/strict_json.h"

namespace ptrain::ckpt {
namespace {

constexpr std::int64_t kMaxManifestBytes = std::int64_t{1} << 30;
constexpr std::string_view kChecksumLineStart = "{\"manifest_crc32c\": \"";
constexpr std::string_view kChecksumLineEnd = "\",";

std::uint32_t crc_of(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

// The checksum line's value, or a CheckpointError if the first line starts like one but is not.
std::uint32_t recorded_checksum(std::string_view first_line, const std::string& path) {
  std::uint32_t recorded = 0;
  const std::size_t digits_at = kChecksumLineStart.size();
  if (first_line.size() != digits_at + 8 + kChecksumLineEnd.size() ||
      first_line.substr(digits_at + 8) != kChecksumLineEnd ||
      !parse_crc32c_hex(std::string(first_line.substr(digits_at, 8)), recorded))
    throw CheckpointError(path, 0,
                          "the first line is not {\"manifest_crc32c\": \"<8 hex digits>\", followed by a "
                          "newline (the manifest's checksum line)");
  return recorded;
}

}  // namespace

std::string manifest_text(const nlohmann::json& manifest) {
  if (!manifest.is_object() || manifest.empty() || manifest.contains(kManifestChecksumKey))
    throw std::invalid_argument("manifest_text: expected a non-empty object without a checksum");
  const std::string body = manifest.dump(1);  // "{\n" members "\n}"
  const std::string rest = body.substr(2) + "\n";
  return std::string(kChecksumLineStart) + crc32c_hex(crc_of(rest)) + std::string(kChecksumLineEnd) + "\n" +
         rest;
}

ManifestFile read_manifest_file(const std::string& path) {
  const runtime::MappedFile bytes = map_file(path);
  if (bytes.size() > kMaxManifestBytes) throw CheckpointError(path, "manifest larger than 1 GiB");
  const std::string_view text(reinterpret_cast<const char*>(bytes.bytes().data()), bytes.bytes().size());
  ManifestFile out;
  if (text.substr(0, kChecksumLineStart.size()) == kChecksumLineStart) {
    const std::size_t newline = text.find('\n');
    const std::uint32_t recorded = recorded_checksum(text.substr(0, newline), path);
    const std::uint32_t actual = crc_of(text.substr(newline + 1));
    if (actual != recorded)
      throw CheckpointError(path, "checksum mismatch: the bytes after the first line have CRC32C " +
                                      crc32c_hex(actual) + ", the first line records " + crc32c_hex(recorded) +
                                      " (the manifest was edited or is corrupt: restore it, or move its step "
                                      "directory out of the way to use an older checkpoint)");
    out.checksummed = true;
  }
  out.value = parse_json_strict(text, path);
  if (!out.checksummed && out.value.is_object() && out.value.contains(kManifestChecksumKey))
    throw CheckpointError(path, std::string(kManifestChecksumKey) +
                                    " is not on the first line: the file was rewritten (reformatted?), which "
                                    "changes the bytes its checksum covers");
  return out;
}

ManifestHeader check_manifest_header(const ManifestFile& manifest, const std::string& path,
                                     const std::string& dir) {
  const JsonReader m(manifest.value, path, "");
  m.only_keys({kManifestChecksumKey, "format", "version", "step", "job", "state", "files", "tensors"});
  if (m.string("format") != kCheckpointFormatName)
    m.fail("format is \"" + m.string("format") + "\", expected \"" + kCheckpointFormatName + "\"");
  ManifestHeader header;
  header.version = m.integer("version");
  if (header.version != 1 && header.version != kCheckpointFormatVersion)
    m.fail("format version " + std::to_string(header.version) +
           " is not supported (this ptrain reads versions 1 and " + std::to_string(kCheckpointFormatVersion) + ")");
  if (header.version >= 2 && !manifest.checksummed)
    m.fail("format version " + std::to_string(header.version) +
           " starts with the checksum line {\"manifest_crc32c\": ...}, which is missing");
  header.step = m.non_negative("step");
  const std::string dir_name = std::filesystem::path(dir).filename().string();
  if (const auto named = parse_step_dir_name(dir_name); named && *named != header.step)
    m.fail("step is " + std::to_string(header.step) + " but the directory is named " + step_dir_name(*named));
  m.object("job");
  const JsonReader state = m.child("state");
  if (state.has("step") && state.integer("step") != header.step)
    throw CheckpointError(path, state.where("step") + " is " + std::to_string(state.integer("step")) +
                                    " but the manifest is of step " + std::to_string(header.step));
  return header;
}

}  // namespace ptrain::ckpt
