#include "engine/ckpt/checkpoint.h"

#include <fcntl.h>  // AT_FDCWD
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc)

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/crc32c.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/manifest.h"
#include "engine/ckpt/safetensors.h"
#include "engine/ckpt/strict_json.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;
namespace {

// A file name inside a step directory: no separators, no "..", nothing hidden.
bool plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& path,
                           const std::string& what) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw CheckpointError(path, what + ": invalid shape " + nlohmann::json(shape).dump());
  }
  return n;
}

std::vector<std::int64_t> read_shape(const nlohmann::json& value, const std::string& path,
                                     const std::string& what) {
  if (!value.is_array()) throw CheckpointError(path, what + ": expected a shape list, found " + value.dump());
  std::vector<std::int64_t> shape;
  for (const nlohmann::json& d : value) {
    std::int64_t dim = 0;
    if (!json_int64(d, dim) || dim < 0)
      throw CheckpointError(path, what + ": expected non-negative integers, found " + value.dump());
    shape.push_back(dim);
  }
  checked_numel(shape, path, what);
  return shape;
}

std::int64_t checked_runs_numel(const IndexRuns& runs, const std::string& path, const std::string& what) {
  std::int64_t total = 0;
  for (const IndexRun& r : runs) {
    if (__builtin_add_overflow(total, r.numel(), &total))
      throw CheckpointError(path, what + ": runs hold more elements than can be counted");
  }
  return total;
}

// Sorted, disjoint blocks of a tensor's global indices and where each is stored. Where several
// pieces hold the same elements (replicas), the first piece in manifest order wins.
struct Segment {
  std::int64_t begin = 0, length = 0;
  std::size_t piece = 0;
  std::int64_t stored_offset = 0;  // element offset inside the piece's stored tensor
};

std::vector<Segment> build_segments(const std::vector<const IndexRuns*>& piece_runs) {
  std::vector<Segment> all;
  for (std::size_t p = 0; p < piece_runs.size(); ++p) {
    for_each_block(*piece_runs[p], [&](std::int64_t start, std::int64_t length, std::int64_t position) {
      if (length > 0) all.push_back({start, length, p, position});
    });
  }
  std::stable_sort(all.begin(), all.end(), [](const Segment& a, const Segment& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.piece < b.piece;
  });
  std::vector<Segment> disjoint;
  std::int64_t covered = 0;
  for (Segment s : all) {
    if (s.begin < covered) {
      const std::int64_t cut = covered - s.begin;
      if (cut >= s.length) continue;
      s.begin += cut, s.length -= cut, s.stored_offset += cut;
    }
    covered = s.begin + s.length;
    disjoint.push_back(s);
  }
  return disjoint;
}

// The first global element range [begin, end) of a tensor of `numel` elements that no segment
// covers, or nullopt if all are covered.
std::optional<std::pair<std::int64_t, std::int64_t>> first_gap(const std::vector<Segment>& segments,
                                                               std::int64_t numel) {
  std::int64_t covered = 0;
  for (const Segment& s : segments) {
    if (s.begin > covered) return std::make_pair(covered, s.begin);
    covered = std::max(covered, s.begin + s.length);
  }
  if (covered < numel) return std::make_pair(covered, numel);
  return std::nullopt;
}

// Removes checkpoints older than `step` beyond the newest `keep` (counting `step` itself), and
// leftovers of crashed saves. Best effort: the new checkpoint is already committed.
void prune(const std::string& dir, std::int64_t step, int keep) {
  std::error_code ec;
  std::vector<std::pair<std::int64_t, fs::path>> older;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (const auto n = parse_step_dir_name(name); n && *n < step && e.is_directory(ec)) older.emplace_back(*n, e.path());
  }
  if (keep > 0) {
    std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (std::size_t i = static_cast<std::size_t>(keep - 1); i < older.size(); ++i)
      fs::remove_all(older[i].second, ec);
  }
  remove_leftovers(dir);
}

// Moves the finished temporary directory to its final name; true if that name was free. An
// existing step directory (the same step saved again) is swapped out atomically and then removed.
bool install_step_dir(const std::string& tmp_dir, const std::string& final_dir) {
  if (::rename(tmp_dir.c_str(), final_dir.c_str()) == 0) return true;
  if (errno != ENOTEMPTY && errno != EEXIST)
    throw CheckpointIoError(final_dir, "cannot rename " + tmp_dir + " to it", errno);
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
    throw CheckpointIoError(final_dir, "cannot replace it with " + tmp_dir, errno);
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);  // now the old contents
  return false;
}

}  // namespace

// ------------------------------------------------------------------------------------------ rank info

nlohmann::json to_json(const RankFileInfo& info) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const RankFileInfo::Piece& p : info.pieces)
    pieces.push_back(
        {{"tensor", p.tensor}, {"shape", p.global_shape}, {"key", p.key}, {"runs", runs_to_json(p.runs)}});
  return {{"rank", info.rank},
          {"file", info.file},
          {"bytes", info.bytes},
          {"crc32c", crc32c_hex(info.crc32c)},
          {"pieces", std::move(pieces)}};
}

RankFileInfo rank_file_info_from_json(const nlohmann::json& value) {
  const std::string origin = "<rank file info>";
  JsonReader r(value, origin, "rank");
  RankFileInfo info;
  info.rank = static_cast<int>(std::min<std::int64_t>(r.non_negative("rank"), 1 << 30));
  info.file = r.string("file");
  if (!plain_file_name(info.file)) r.fail("bad file name \"" + info.file + "\"");
  info.bytes = r.non_negative("bytes");
  if (!parse_crc32c_hex(r.string("crc32c"), info.crc32c)) r.fail("crc32c is not 8 hex digits");
  for (const nlohmann::json& p : r.array("pieces")) {
    JsonReader pr(p, origin, "rank.pieces[]");
    RankFileInfo::Piece piece;
    piece.tensor = pr.string("tensor");
    piece.key = pr.string("key");
    piece.global_shape = read_shape(pr.at("shape"), origin, pr.where("shape"));
    piece.runs = runs_from_json(pr.at("runs"), checked_numel(piece.global_shape, origin, piece.tensor),
                                origin, pr.where("runs"));
    info.pieces.push_back(std::move(piece));
  }
  return info;
}

// ------------------------------------------------------------------------------------------ saving

std::string begin_checkpoint(const std::string& dir, std::int64_t step) {
  if (step < 0) throw std::invalid_argument("begin_checkpoint: negative step");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointIoError(dir, "cannot create checkpoint directory", ec.value());
  const std::string tmp = join_path(dir, step_dir_name(step) + ".tmp-" + random_hex_suffix());
  make_directory(tmp);
  return tmp;
}

RankFileInfo write_rank_file(const std::string& tmp_dir, int rank, std::int64_t step,
                             const std::vector<TensorShard>& shards) {
  RankFileInfo info;
  info.rank = rank;
  info.file = "rank_" + std::to_string(rank) + ".safetensors";
  SafetensorsWriter writer;
  writer.set_metadata("format", "ptrain");
  writer.set_metadata("rank", std::to_string(rank));
  writer.set_metadata("step", std::to_string(step));
  for (const TensorShard& s : shards) {
    const std::int64_t numel = runs_numel(s.runs);
    std::vector<std::int64_t> stored =
        s.stored_shape.empty() ? std::vector<std::int64_t>{numel} : s.stored_shape;
    std::int64_t stored_numel = 1;
    for (std::int64_t d : stored) stored_numel *= d;
    if (stored_numel != numel)
      throw std::invalid_argument("write_rank_file: shard " + s.name + " stores " +
                                  std::to_string(stored_numel) + " elements but its runs list " +
                                  std::to_string(numel));
    writer.add_f32(s.name, std::move(stored), s.data);
    info.pieces.push_back({s.name, s.global_shape, s.name, s.runs});
  }
  const SafetensorsWriter::Written w = writer.write(join_path(tmp_dir, info.file), /*sync=*/true);
  info.bytes = w.bytes;
  info.crc32c = w.crc32c;
  return info;
}

std::string commit_checkpoint(const std::string& dir, const std::string& tmp_dir, std::int64_t step,
                              const nlohmann::json& job_meta, const nlohmann::json& state,
                              const std::vector<RankFileInfo>& ranks, int keep) {
  nlohmann::json files = nlohmann::json::array();
  struct Merged {
    std::vector<std::int64_t> shape;
    nlohmann::json pieces = nlohmann::json::array();
    std::vector<const IndexRuns*> runs;
  };
  std::map<std::string, Merged> tensors;
  std::set<std::string> file_names;
  for (const RankFileInfo& rank : ranks) {
    if (!file_names.insert(rank.file).second)
      throw std::invalid_argument("commit_checkpoint: two ranks wrote " + rank.file);
    files.push_back(
        {{"file", rank.file}, {"rank", rank.rank}, {"bytes", rank.bytes}, {"crc32c", crc32c_hex(rank.crc32c)}});
    for (const RankFileInfo::Piece& p : rank.pieces) {
      auto [it, fresh] = tensors.try_emplace(p.tensor);
      if (fresh) it->second.shape = p.global_shape;
      if (it->second.shape != p.global_shape)
        throw std::invalid_argument("commit_checkpoint: ranks disagree on the shape of " + p.tensor);
      it->second.pieces.push_back({{"file", rank.file}, {"key", p.key}, {"runs", runs_to_json(p.runs)}});
      it->second.runs.push_back(&p.runs);
    }
  }
  nlohmann::json tensor_json = nlohmann::json::object();
  for (auto& [name, m] : tensors) {
    std::int64_t numel = 1;
    for (std::int64_t d : m.shape) numel *= d;
    // A layout bug would otherwise surface only when someone loads the checkpoint.
    if (const auto gap = first_gap(build_segments(m.runs), numel))
      throw std::logic_error("commit_checkpoint: elements [" + std::to_string(gap->first) + ", " +
                             std::to_string(gap->second) + ") of " + name + " are held by no rank");
    tensor_json[name] = {{"dtype", "F32"}, {"shape", m.shape}, {"pieces", std::move(m.pieces)}};
  }
  const nlohmann::json manifest = {{"format", kCheckpointFormatName},
                                   {"version", kCheckpointFormatVersion},
                                   {"step", step},
                                   {"job", job_meta.is_null() ? nlohmann::json::object() : job_meta},
                                   {"state", state.is_null() ? nlohmann::json::object() : state},
                                   {"files", std::move(files)},
                                   {"tensors", std::move(tensor_json)}};
  const std::string text = manifest_text(manifest);
  {
    FileWriter out(join_path(tmp_dir, kManifestName));
    out.write(text.data(), text.size());
    out.finish();
  }
  fsync_directory(tmp_dir);

  const std::string final_dir = join_path(dir, step_dir_name(step));
  const bool fresh = install_step_dir(tmp_dir, final_dir);
  try {
    fsync_directory(dir);
    write_file_atomically(join_path(dir, kLatestName), step_dir_name(step) + "\n");
  } catch (const CheckpointIoError&) {
    // `latest` still names the previous checkpoint: take the new step back out, so that a failed
    // save leaves the directory as it found it (and frees the space).
    std::error_code ec;
    if (fresh) fs::remove_all(final_dir, ec);
    throw;
  }
  prune(dir, step, keep);
  return final_dir;
}

std::string save_checkpoint(const std::string& dir, std::int64_t step, const nlohmann::json& job_meta,
                            const nlohmann::json& state, const std::vector<TensorShard>& shards, int keep) {
  const std::string tmp = begin_checkpoint(dir, step);
  try {
    const RankFileInfo info = write_rank_file(tmp, 0, step, shards);
    return commit_checkpoint(dir, tmp, step, job_meta, state, {info}, keep);
  } catch (...) {
    abandon_checkpoint(tmp);
    throw;
  }
}

void abandon_checkpoint(const std::string& tmp_dir) {
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
}

// ------------------------------------------------------------------------------------------ loading

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
