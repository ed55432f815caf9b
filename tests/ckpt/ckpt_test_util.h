// Shared helpers of the ckpt tests: raw file bytes, error messages, tiny models.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/config/job_spec.h"
#include "engine/model/param_registry.h"
#include "engine/model/param_store.h"
#include "tests/temp_dir.h"

namespace ptrain::ckpt::testing {

using ptrain::test::TempDir;

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of the CheckpointError `fn` throws, or "" if it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

inline std::string read_bytes(const std::string& path) {
  std::string bytes(static_cast<std::size_t>(std::filesystem::file_size(path)), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

inline config::ModelSpec tiny_gpt2() {
  config::ModelSpec m;
  m.arch = config::Arch::Gpt2;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 128;
  m.vocab = 50;
  m.padded_vocab = 52;  // as for tp = 4
  m.seq_len = 16;
  m.tie_embeddings = true;
  return m;
}

inline config::ModelSpec tiny_llama(bool tied = false) {
  config::ModelSpec m;
  m.arch = config::Arch::Llama;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn_hidden = 64;
  m.vocab = 50;
  m.padded_vocab = 52;
  m.seq_len = 16;
  m.norm_eps = 1e-5;
  m.rope_theta = 10000.0;
  m.tie_embeddings = tied;
  return m;
}

inline config::ModelSpec tiny_mixtral() {
  config::ModelSpec m = tiny_llama(false);
  m.arch = config::Arch::Mixtral;
  m.moe = config::MoeSpec{};
  m.moe->experts = 4;
  m.moe->top_k = 2;
  return m;
}

inline model::ShardCoords tp_coords(int tp_rank, int tp) {
  model::ShardCoords c;
  c.tp_rank = tp_rank;
  c.tp = tp;
  return c;
}

// A store of `m` at (tp_rank, tp), initialised from `seed`.
inline model::ParamStore make_store(const config::ModelSpec& m, int tp_rank = 0, int tp = 1,
                                    std::uint64_t seed = 7) {
  model::ParamStore store(model::build_registry(m), tp_coords(tp_rank, tp));
  store.initialize(seed, m.layers);
  return store;
}

// The whole tensor `name` of a tp = 1 store, as a vector.
inline std::vector<float> whole(const model::ParamStore& store, const std::string& name) {
  const model::ParamSlot& s = store.slot(name);
  return std::vector<float>(store.params() + s.offset, store.params() + s.offset + s.numel);
}

}  // namespace ptrain::ckpt::testing
