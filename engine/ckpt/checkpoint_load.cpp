// Loading a checkpoint (checkpoint.h): its manifest checked against the files it names, and any
// tensor, or any part of one, read from the pieces that hold it, whatever layout saved it.
#include "engine/ckpt/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/checkpoint_pieces.h"
#include "engine/ckpt/crc32c.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/manifest.h"
#include "engine/ckpt/safetensors.h"
#include "engine/ckpt/strict_json.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;

struct LoadedCheckpoint::Impl {
  struct File {
    std::string name;
    std::int64_t bytes = 0;
    std::uint32_t crc32c = 0;
    std::unique_ptr<SafetensorsFile> opened;
  };
  struct Piece {
    std::size_t file = 0;
    std::string key;
    StDtype dtype = StDtype::F32;  // the manifest's, of the tensor the piece belongs to
    IndexRuns runs;
    std::int64_t numel = 0;
    const StTensorInfo* stored = nullptr;  // set once checked against the opened file
  };
  struct Tensor {
    std::vector<std::int64_t> shape;
    std::int64_t numel = 0;
    std::vector<Piece> pieces;
    std::vector<Segment> segments;  // built on first read
    bool indexed = false;
  };

  std::string manifest_path;
  std::vector<File> files;
  std::map<std::string, Tensor> tensors;

  const Tensor& tensor(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end())
      throw CheckpointError(manifest_path, "no tensor \"" + name + "\" in the checkpoint");
    return it->second;
  }

  SafetensorsFile& open_file(std::size_t index, const std::string& dir) {
    File& f = files[index];
    if (f.opened) return *f.opened;
    runtime::MappedFile bytes = map_file(join_path(dir, f.name));
    if (bytes.size() != f.bytes)
      throw CheckpointError(bytes.path(), "file is " + std::to_string(bytes.size()) +
                                              " bytes but the manifest records " + std::to_string(f.bytes) +
                                              " (truncated or replaced)");
    const std::uint32_t crc = crc32c_parallel(bytes.bytes().data(), bytes.bytes().size());
    if (crc != f.crc32c)
      throw CheckpointError(bytes.path(), "checksum mismatch: CRC32C is " + crc32c_hex(crc) +
                                              ", the manifest records " + crc32c_hex(f.crc32c) +
                                              " (the file is corrupt)");
    f.opened = std::make_unique<SafetensorsFile>(std::move(bytes));
    return *f.opened;
  }

  // The stored tensor of a piece, checked against the manifest the first time.
  const StTensorInfo& stored(Piece& p, const std::string& tensor_name, const std::string& dir) {
    SafetensorsFile& file = open_file(p.file, dir);
    if (p.stored != nullptr) return *p.stored;
    const StTensorInfo* t = file.find(p.key);
    if (t == nullptr)
      throw CheckpointError(file.path(),
                            "has no tensor \"" + p.key + "\", which the manifest lists for " + tensor_name);
    if (t->dtype != p.dtype)
      throw CheckpointError(file.path(), "tensor \"" + p.key + "\" has dtype " + dtype_name(t->dtype) +
                                             "; the manifest says " + tensor_name + " is " + dtype_name(p.dtype));
    if (t->numel() != p.numel)
      throw CheckpointError(file.path(), "tensor \"" + p.key + "\" has " + std::to_string(t->numel()) +
                                             " elements but the manifest maps " + std::to_string(p.numel));
    p.stored = t;
    return *t;
  }
};

LoadedCheckpoint::LoadedCheckpoint(const std::string& step_dir)
    : dir_(step_dir), impl_(std::make_unique<Impl>()) {
  Impl& impl = *impl_;
  impl.manifest_path = join_path(dir_, kManifestName);
  const std::string& mpath = impl.manifest_path;
  std::error_code ec;
  if (!fs::exists(mpath, ec))
    throw CheckpointError(dir_,
                          "not a checkpoint: no manifest.json (an unfinished save leaves only a .tmp directory)");
  ManifestFile read = read_manifest_file(mpath);
  step_ = check_manifest_header(read, mpath, dir_).step;
  if (!read.checksummed)
    warnings_.push_back(mpath + ": written before manifests carried a checksum (format version 1): nothing "
                                "vouches that it is unchanged; it is read as before");
  manifest_ = std::move(read.value);
  const JsonReader m(manifest_, mpath, "");
  job_ = m.object("job");
  state_ = m.object("state");

  std::map<std::string, std::size_t> file_index;
  for (const nlohmann::json& f : m.array("files")) {
    const JsonReader fr(f, mpath, "files[]");
    fr.only_keys({"file", "rank", "bytes", "crc32c"});
    Impl::File file;
    file.name = fr.string("file");
    if (!plain_file_name(file.name)) fr.fail("bad file name \"" + file.name + "\"");
    fr.non_negative("rank");
    file.bytes = fr.non_negative("bytes");
    if (!parse_crc32c_hex(fr.string("crc32c"), file.crc32c))
      fr.fail("crc32c of " + file.name + " is not 8 hex digits");
    if (!file_index.emplace(file.name, impl.files.size()).second)
      fr.fail("file " + file.name + " listed twice");
    impl.files.push_back(std::move(file));
  }

  const nlohmann::json& tensors = m.object("tensors");
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const std::string what = "tensors[\"" + it.key() + "\"]";
    const JsonReader tr(*it, mpath, what);
    tr.only_keys({"dtype", "shape", "pieces"});
    const std::string dtype_text = tr.string("dtype");
    const std::optional<StDtype> dtype = parse_dtype(dtype_text);
    if (!dtype || (*dtype != StDtype::F32 && *dtype != StDtype::BF16 && *dtype != StDtype::F16))
      tr.fail("unsupported dtype \"" + dtype_text + "\"");
    Impl::Tensor t;
    t.shape = read_shape(tr.at("shape"), mpath, tr.where("shape"));
    t.numel = checked_numel(t.shape, mpath, what);
    for (const nlohmann::json& p : tr.array("pieces")) {
      const JsonReader pr(p, mpath, what + ".pieces[]");
      pr.only_keys({"file", "key", "runs"});
      Impl::Piece piece;
      const std::string file = pr.string("file");
      auto f = file_index.find(file);
      if (f == file_index.end()) pr.fail("file \"" + file + "\" is not in the manifest's file list");
      piece.file = f->second;
      piece.key = pr.string("key");
      piece.dtype = *dtype;
      piece.runs = runs_from_json(pr.at("runs"), t.numel, mpath, pr.where("runs"));
      piece.numel = checked_runs_numel(piece.runs, mpath, pr.where("runs"));
      t.pieces.push_back(std::move(piece));
    }
    impl.tensors.emplace(it.key(), std::move(t));
  }
}

LoadedCheckpoint::~LoadedCheckpoint() = default;
LoadedCheckpoint::LoadedCheckpoint(LoadedCheckpoint&&) noexcept = default;
LoadedCheckpoint& LoadedCheckpoint::operator=(LoadedCheckpoint&&) noexcept = default;

std::int64_t LoadedCheckpoint::consumed_samples() const {
  const JsonReader state(state_, impl_->manifest_path, "state");
  const std::int64_t consumed = state.integer("consumed_samples");
  // At least one sample a step, at most the largest global_batch (an int) a step: the second
  // written as a division, since step * INT_MAX can overflow.
  constexpr std::int64_t kMostPerStep = std::numeric_limits<int>::max();
  const bool too_few = consumed < step_ || (step_ == 0 && consumed != 0);
  const bool too_many = consumed > 0 && (consumed - 1) / kMostPerStep >= step_;
  if (too_few || too_many)
    state.fail("consumed_samples is " + std::to_string(consumed) + ", which " + std::to_string(step_) +
               " steps cannot have taken (each takes from 1 to " + std::to_string(kMostPerStep) +
               " samples): restore the manifest, or move this step directory aside to resume from the one "
               "before");
  return consumed;
}

std::vector<std::string> LoadedCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : impl_->tensors) names.push_back(name);
  return names;
}

bool LoadedCheckpoint::has_tensor(const std::string& name) const {
  return impl_->tensors.count(name) != 0;
}

const std::vector<std::int64_t>& LoadedCheckpoint::tensor_shape(const std::string& name) const {
  return impl_->tensor(name).shape;
}

void LoadedCheckpoint::read_tensor(const std::string& name, const IndexRuns& global_runs, float* out) {
  Impl& impl = *impl_;
  impl.tensor(name);  // a CheckpointError if missing
  Impl::Tensor& t = impl.tensors.at(name);
  if (!t.indexed) {
    std::vector<const IndexRuns*> runs;
    for (const Impl::Piece& p : t.pieces) runs.push_back(&p.runs);
    t.segments = build_segments(runs);
    t.indexed = true;
  }
  for_each_block(global_runs, [&](std::int64_t start, std::int64_t length, std::int64_t position) {
    if (start < 0 || start + length > t.numel)
      throw std::out_of_range("read_tensor: " + name + " has " + std::to_string(t.numel) +
                              " elements; asked for [" + std::to_string(start) + ", " +
                              std::to_string(start + length) + ")");
    while (length > 0) {
      auto it = std::upper_bound(t.segments.begin(), t.segments.end(), start,
                                 [](std::int64_t g, const Segment& s) { return g < s.begin; });
      if (it == t.segments.begin() || start >= std::prev(it)->begin + std::prev(it)->length) {
        const std::int64_t gap_end = it == t.segments.end() ? t.numel : it->begin;
        throw CheckpointError(dir_, "elements [" + std::to_string(start) + ", " + std::to_string(gap_end) +
                                        ") of " + name + " are in no file of the checkpoint");
      }
      const Segment& s = *std::prev(it);
      const std::int64_t n = std::min(length, s.begin + s.length - start);
      Impl::Piece& piece = t.pieces[s.piece];
      const StTensorInfo& stored = impl.stored(piece, name, dir_);
      impl.files[piece.file].opened->read_f32(stored, s.stored_offset + (start - s.begin), n, out + position);
      start += n, length -= n, position += n;
    }
  });
}

std::vector<float> LoadedCheckpoint::read_tensor(const std::string& name) {
  const std::int64_t numel = impl_->tensor(name).numel;
  std::vector<float> out(static_cast<std::size_t>(numel));
  read_tensor(name, IndexRuns{{0, numel, 0, 1}}, out.data());
  return out;
}

void LoadedCheckpoint::verify() {
  for (std::size_t f = 0; f < impl_->files.size(); ++f) impl_->open_file(f, dir_);
  for (auto& [name, t] : impl_->tensors)
    for (Impl::Piece& p : t.pieces) impl_->stored(p, name, dir_);
}

LoadedCheckpoint open_checkpoint(const std::string& path, std::vector<std::string>* warnings) {
  std::error_code ec;
  if (fs::is_regular_file(join_path(path, kManifestName), ec)) return LoadedCheckpoint(path);
  if (!fs::is_directory(path, ec)) throw CheckpointError(path, "no such checkpoint directory");
  const std::optional<std::string> latest = latest_checkpoint(path, warnings);
  if (!latest)
    throw CheckpointError(path,
                          "no checkpoint here: neither a manifest.json nor a complete step_<N> directory");
  return LoadedCheckpoint(*latest);
}


}  // namespace ptrain::ckpt
