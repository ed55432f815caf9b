// A step directory's manifest.json as bytes: written with its own checksum, read back verified.
//
// Format version 2 (checkpoint.h has the members): the file's first line is
//
//   {"manifest_crc32c": "<8 lowercase hex digits>",
//
// the CRC32C (crc32c.h, as for the rank files) of every byte after that line's newline, to the end
// of the file; those bytes continue the same JSON object, so the whole file is plain JSON. An edit
// to any other byte (a step changed by hand, a flipped bit) no longer matches. Version 1 manifests
// (written before this checksum) have no such line: they are read as before, with
// `checksummed = false`, and the caller warns that nothing vouches for them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace ptrain::ckpt {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kManifestChecksumKey = "manifest_crc32c";

// The bytes of manifest.json for `manifest`, a non-empty JSON object without the checksum key.
std::string manifest_text(const nlohmann::json& manifest);

struct ManifestFile {
  nlohmann::json value;  // the whole object, the checksum key included
  bool checksummed = false;
};

// Reads and parses `path` (strict JSON), verifying the checksum line where there is one. A
// CheckpointError names the file: unreadable, larger than 1 GiB, checksum mismatch, a checksum key
// that is not on the first line (the file was reformatted), invalid JSON.
ManifestFile read_manifest_file(const std::string& path);

// The members every manifest has, checked: `format`, `version` (2 needs the checksum line; 1 is
// read without one), `step` (equal to the N of a step_<N> directory it is in), `job` and `state`
// objects, and `state.step`, where present, equal to `step`. `dir` is the step directory.
struct ManifestHeader {
  std::int64_t step = 0;
  std::int64_t version = 0;
};
ManifestHeader check_manifest_header(const ManifestFile& manifest, const std::string& path,
                                     const std::string& dir);

}  // namespace ptrain::ckpt
