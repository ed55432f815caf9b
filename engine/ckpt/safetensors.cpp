#include "engine/ckpt/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/strict_json.h"
#include "engine/io/utf8.h"

namespace ptrain::ckpt {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

struct DtypeRow {
  StDtype dtype;
  const char* name;
  std::size_t bytes;
};
constexpr std::array<DtypeRow, 15> kDtypes = {{
    {StDtype::Bool, "BOOL", 1},
    {StDtype::U8, "U8", 1},
    {StDtype::I8, "I8", 1},
    {StDtype::F8_E5M2, "F8_E5M2", 1},
    {StDtype::F8_E4M3, "F8_E4M3", 1},
    {StDtype::I16, "I16", 2},
    {StDtype::U16, "U16", 2},
    {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2},
    {StDtype::I32, "I32", 4},
    {StDtype::U32, "U32", 4},
    {StDtype::F32, "F32", 4},
    {StDtype::I64, "I64", 8},
    {StDtype::U64, "U64", 8},
    {StDtype::F64, "F64", 8},
}};

const DtypeRow& row_of(StDtype dtype) {
  for (const DtypeRow& r : kDtypes)
    if (r.dtype == dtype) return r;
  throw std::logic_error("unknown StDtype");
}

constexpr const char* kMetadataKey = "__metadata__";

// One tensor entry of the header, fully checked.
StTensorInfo parse_entry(const std::string& name, const nlohmann::json& value, const std::string& path,
                         std::int64_t header_offset, std::int64_t data_bytes) {
  const std::string what = "tensor \"" + name + "\"";
  auto fail = [&](const std::string& detail) -> CheckpointError {
    return CheckpointError(path, header_offset, what + ": " + detail);
  };
  if (!value.is_object()) throw fail("expected an object, found " + std::string(value.type_name()));
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      throw fail("unexpected key \"" + it.key() + "\" (expected dtype, shape, data_offsets)");
  }
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) throw fail(std::string("missing \"") + key + "\"");

  StTensorInfo t;
  t.name = name;
  const nlohmann::json& dtype = value["dtype"];
  if (!dtype.is_string()) throw fail("dtype: expected a string, found " + dtype.dump());
  const std::optional<StDtype> parsed = parse_dtype(dtype.get_ref<const std::string&>());
  if (!parsed) throw fail("unknown dtype " + dtype.dump());
  t.dtype = *parsed;

  const nlohmann::json& shape = value["shape"];
  if (!shape.is_array()) throw fail("shape: expected an array, found " + shape.dump());
  std::int64_t numel = 1;
  for (const nlohmann::json& d : shape) {
    std::int64_t dim = 0;
    if (!json_int64(d, dim) || dim < 0)
      throw fail("shape: expected non-negative integers, found " + shape.dump());
    t.shape.push_back(dim);
    if (__builtin_mul_overflow(numel, dim, &numel)) throw fail("shape " + shape.dump() + " overflows");
  }
  std::int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(dtype_bytes(t.dtype)), &nbytes))
    throw fail("shape " + shape.dump() + " overflows");

  const nlohmann::json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !json_int64(offsets[0], t.begin) ||
      !json_int64(offsets[1], t.end) || t.begin < 0 || t.end < t.begin)
    throw fail("data_offsets: expected [begin, end] with 0 <= begin <= end, found " + offsets.dump());
  if (t.end > data_bytes)
    throw fail("data_offsets " + offsets.dump() + " run past the end of the data section (" +
               std::to_string(data_bytes) + " bytes)");
  if (t.end - t.begin != nbytes)
    throw fail("data_offsets " + offsets.dump() + " hold " + std::to_string(t.end - t.begin) + " bytes but " +
               dtype_name(t.dtype) + " " + shape.dump() + " needs " + std::to_string(nbytes));
  return t;
}

// The tensors must tile the data section exactly: sorted by offset, each starts where the previous
// ended, the last ends at the end of the file (no overlaps, no holes, no trailing bytes).
void check_tiling(const StHeader& h, std::int64_t data_bytes, const std::string& path) {
  std::vector<const StTensorInfo*> by_offset;
  for (const StTensorInfo& t : h.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const StTensorInfo* a, const StTensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::int64_t covered = 0;
  const StTensorInfo* previous = nullptr;
  for (const StTensorInfo* t : by_offset) {
    if (t->begin < covered)
      throw CheckpointError(path, h.data_start + t->begin,
                            "tensor \"" + t->name + "\" overlaps tensor \"" +
                                (previous ? previous->name : std::string()) + "\"");
    if (t->begin > covered)
      throw CheckpointError(path, h.data_start + covered,
                            std::to_string(t->begin - covered) + " bytes before tensor \"" + t->name +
                                "\" belong to no tensor");
    covered = t->end;
    previous = t;
  }
  if (covered != data_bytes)
    throw CheckpointError(
        path, h.data_start + covered,
        std::to_string(data_bytes - covered) + " bytes after the last tensor belong to no tensor");
}

}  // namespace

const char* dtype_name(StDtype dtype) {
  return row_of(dtype).name;
}
std::size_t dtype_bytes(StDtype dtype) {
  return row_of(dtype).bytes;
}

std::optional<StDtype> parse_dtype(std::string_view name) {
  for (const DtypeRow& r : kDtypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

std::int64_t StTensorInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

const StTensorInfo* StHeader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const StTensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

StHeader parse_safetensors(std::span<const std::byte> file, const std::string& path) {
  const auto file_size = static_cast<std::int64_t>(file.size());
  if (file_size < 8)
    throw CheckpointError(
        path, 0, "file is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  if (header_len > static_cast<std::uint64_t>(kMaxSafetensorsHeaderBytes))
    throw CheckpointError(path, 0,
                          "header length " + std::to_string(header_len) + " exceeds the limit of " +
                              std::to_string(kMaxSafetensorsHeaderBytes) +
                              " bytes (not a safetensors file?)");
  const auto n = static_cast<std::int64_t>(header_len);
  if (n > file_size - 8)
    throw CheckpointError(path, 0,
                          "header length " + std::to_string(n) + " runs past the end of the file (" +
                              std::to_string(file_size) + " bytes): truncated?");
  if (n < 2)
    throw CheckpointError(path, 0, "header length " + std::to_string(n) + " is too short for a JSON object");

  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, static_cast<std::size_t>(n));
  const nlohmann::json root = parse_json_strict(text, path, 8);
  if (!root.is_object())
    throw CheckpointError(path, 8, "header: expected a JSON object, found " + std::string(root.type_name()));

  StHeader h;
  h.data_start = 8 + n;
  const std::int64_t data_bytes = file_size - h.data_start;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it->is_object()) throw CheckpointError(path, 8, "__metadata__: expected an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          throw CheckpointError(path, 8,
                                "__metadata__[\"" + m.key() + "\"]: expected a string, found " + m->dump());
        h.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    if (it.key().empty()) throw CheckpointError(path, 8, "a tensor has an empty name");
    // Errors point at the entry's key in the header (its first occurrence as a JSON string).
    const std::size_t at = text.find(nlohmann::json(it.key()).dump());
    const std::int64_t entry_offset = 8 + (at == std::string_view::npos ? 0 : static_cast<std::int64_t>(at));
    h.tensors.push_back(parse_entry(it.key(), *it, path, entry_offset, data_bytes));
  }
  // nlohmann objects iterate in key order, so tensors are sorted by name already; make it explicit.
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const StTensorInfo& a, const StTensorInfo& b) { return a.name < b.name; });
  check_tiling(h, data_bytes, path);
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : SafetensorsFile(map_file(path)) {}

SafetensorsFile::SafetensorsFile(runtime::MappedFile bytes)
    : bytes_(std::move(bytes)), header_(parse_safetensors(bytes_.bytes(), bytes_.path())) {}

const StTensorInfo& SafetensorsFile::get(const std::string& name) const {
  const StTensorInfo* t = find(name);
  if (t == nullptr) throw CheckpointError(path(), "no tensor \"" + name + "\"");
  return *t;
}

std::span<const std::byte> SafetensorsFile::data(const StTensorInfo& tensor) const {
  return bytes_.bytes().subspan(static_cast<std::size_t>(header_.data_start + tensor.begin),
                                static_cast<std::size_t>(tensor.end - tensor.begin));
}

void SafetensorsFile::read_f32(const StTensorInfo& tensor, std::int64_t first, std::int64_t count,
                               float* out) const {
  if (first < 0 || count < 0 || first + count > tensor.numel())
    throw std::out_of_range("read_f32: elements [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") outside tensor " + tensor.name);
  const std::byte* src = data(tensor).data() + first * static_cast<std::int64_t>(dtype_bytes(tensor.dtype));
  switch (tensor.dtype) {
    case StDtype::F32:
      std::memcpy(out, src, static_cast<std::size_t>(count) * sizeof(float));
      return;
    case StDtype::BF16:
    case StDtype::F16:
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint16_t bits = 0;
        std::memcpy(&bits, src + 2 * i, 2);
        out[i] = tensor.dtype == StDtype::BF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
      }
      return;
    default:
      throw CheckpointError(path(), "tensor \"" + tensor.name + "\" has dtype " + dtype_name(tensor.dtype) +
                                        "; expected F32, BF16 or F16");
  }
}

float f16_to_f32(std::uint16_t bits) {
  const std::uint32_t sign = (std::uint32_t{bits} & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));  // inf / NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal or zero
  return sign ? -magnitude : magnitude;
}

void SafetensorsWriter::add(std::string name, StDtype dtype, std::vector<std::int64_t> shape,
                            const void* data, std::size_t bytes) {
  if (name.empty() || name == kMetadataKey || io::invalid_utf8_offset(name) >= 0)
    throw std::invalid_argument("safetensors: invalid tensor name \"" + name + "\"");
  for (const Pending& p : tensors_)
    if (p.name == name) throw std::invalid_argument("safetensors: duplicate tensor name \"" + name + "\"");
  std::size_t expected = dtype_bytes(dtype);
  for (std::int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("safetensors: negative dimension in \"" + name + "\"");
    expected *= static_cast<std::size_t>(d);
  }
  if (expected != bytes)
    throw std::invalid_argument("safetensors: \"" + name + "\" has " + std::to_string(bytes) +
                                " bytes, its shape needs " + std::to_string(expected));
  tensors_.push_back({std::move(name), dtype, std::move(shape), data, bytes});
}

void SafetensorsWriter::add_f32(std::string name, std::vector<std::int64_t> shape, const float* data) {
  std::size_t numel = 1;
  for (std::int64_t d : shape) numel *= static_cast<std::size_t>(std::max<std::int64_t>(d, 0));
  add(std::move(name), StDtype::F32, std::move(shape), data, numel * sizeof(float));
}

std::string SafetensorsWriter::header_json() const {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header[kMetadataKey] = metadata_;
  std::int64_t offset = 0;
  for (const Pending& p : tensors_) {
    const auto end = offset + static_cast<std::int64_t>(p.bytes);
    header[p.name] = {{"dtype", dtype_name(p.dtype)}, {"shape", p.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

SafetensorsWriter::Written SafetensorsWriter::write(const std::string& path, bool sync) const {
  const std::string header = header_json();
  const std::uint64_t header_len = header.size();
  FileWriter out(path);
  out.write(&header_len, sizeof header_len);
  out.write(header.data(), header.size());
  for (const Pending& p : tensors_) out.write(p.data, p.bytes);
  const Written written{out.bytes(), out.crc32c()};
  if (sync) {
    out.finish();
  }
  return written;
}

}  // namespace ptrain::ckpt
