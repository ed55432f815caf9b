// safetensors (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}
// padded with spaces, then the tensor data; offsets are relative to the end of the header.
//
// The reader trusts nothing: every header field is type-checked, offsets must lie in the file,
// match dtype*shape, and tile the data section without overlaps or holes (as the reference
// implementation demands), names must be unique. Any violation is a CheckpointError with the file
// and byte offset; no input makes it crash (tests/fuzz/fuzz_safetensors.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/ckpt/file_io.h"
#include "kernels/bf16.h"

namespace ptrain::ckpt {

enum class StDtype : std::uint8_t {
  Bool,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  I64,
  U64,
  F64
};

const char* dtype_name(StDtype dtype);  // as spelled in the header: "F32", "BF16", ...
std::optional<StDtype> parse_dtype(std::string_view name);
std::size_t dtype_bytes(StDtype dtype);

// Headers above this size are rejected before anything is allocated for them.
inline constexpr std::int64_t kMaxSafetensorsHeaderBytes = 100 << 20;

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0, end = 0;  // byte range within the data section
  std::int64_t numel() const;
};

struct StHeader {
  std::int64_t data_start = 0;                  // file offset of the data section (8 + N)
  std::vector<StTensorInfo> tensors;            // sorted by name
  std::map<std::string, std::string> metadata;  // "__metadata__"
  const StTensorInfo* find(const std::string& name) const;
};

// Validates a whole safetensors file held in memory; `path` names it in errors.
StHeader parse_safetensors(std::span<const std::byte> file, const std::string& path);

// A safetensors file mapped read-only and validated on open.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  // Validates bytes already mapped (e.g. after checking their checksum).
  explicit SafetensorsFile(runtime::MappedFile bytes);

  const std::string& path() const { return bytes_.path(); }
  const StHeader& header() const { return header_; }
  const std::vector<StTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const StTensorInfo* find(const std::string& name) const { return header_.find(name); }
  // The tensor named `name`; a CheckpointError if there is none.
  const StTensorInfo& get(const std::string& name) const;

  std::span<const std::byte> data(const StTensorInfo& tensor) const;
  std::span<const std::byte> file_bytes() const { return bytes_.bytes(); }
  // Elements [first, first + count) of a F32, BF16 or F16 tensor, converted to float.
  void read_f32(const StTensorInfo& tensor, std::int64_t first, std::int64_t count, float* out) const;
  void read_f32(const StTensorInfo& tensor, float* out) const { read_f32(tensor, 0, tensor.numel(), out); }

 private:
  runtime::MappedFile bytes_;
  StHeader header_;
};

// Element conversions used by read_f32 (exposed for tests). The bf16 ones are the kernels' (one
// rounding rule for checkpoints and ops).
using kernels::bf16_to_f32;
using kernels::f32_to_bf16;  // round to nearest even; NaN stays NaN
float f16_to_f32(std::uint16_t bits);

// Collects tensors (borrowed: the data must outlive write()) and writes one file. Names must be
// unique, non-empty, valid UTF-8 and not "__metadata__"; the byte size must equal dtype*shape
// (std::invalid_argument otherwise: these are programming errors, not bad input).
class SafetensorsWriter {
 public:
  void add(std::string name, StDtype dtype, std::vector<std::int64_t> shape, const void* data,
           std::size_t bytes);
  void add_f32(std::string name, std::vector<std::int64_t> shape, const float* data);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // The header text, padded with spaces so that the data section starts 8-byte aligned.
  std::string header_json() const;
  struct Written {
    std::int64_t bytes = 0;
    std::uint32_t crc32c = 0;
  };
  // Writes the file; with `sync` it is fsync'd before returning. CheckpointIoError on failure.
  Written write(const std::string& path, bool sync = true) const;

 private:
  struct Pending {
    std::string name;
    StDtype dtype;
    std::vector<std::int64_t> shape;
    const void* data;
    std::size_t bytes;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ptrain::ckpt
