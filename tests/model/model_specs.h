// Published model shapes for the registry and activation tests, with every derived field filled as
// config::load would (padded_vocab for tp = 1, kv_heads, ffn_hidden).
#pragma once

#include "engine/config/job_spec.h"

namespace ptrain::test {

inline config::ModelSpec gpt2_124m() {
  config::ModelSpec m;
  m.arch = config::Arch::Gpt2;
  m.layers = 12, m.hidden = 768, m.heads = 12, m.kv_heads = 12, m.ffn_hidden = 4 * 768;
  m.vocab = m.padded_vocab = 50257;
  m.seq_len = 1024;
  m.tie_embeddings = true;
  return m;
}

inline config::ModelSpec llama(int layers, int hidden, int heads, int kv_heads, int ffn, int vocab) {
  config::ModelSpec m;
  m.arch = config::Arch::Llama;
  m.layers = layers, m.hidden = hidden, m.heads = heads, m.kv_heads = kv_heads, m.ffn_hidden = ffn;
  m.vocab = m.padded_vocab = vocab;
  m.seq_len = 8192;
  return m;
}

inline config::ModelSpec llama3_8b() {
  return llama(32, 4096, 32, 8, 14336, 128256);
}
inline config::ModelSpec llama3_70b() {
  return llama(80, 8192, 64, 8, 28672, 128256);
}
inline config::ModelSpec llama31_405b() {
  return llama(126, 16384, 128, 8, 53248, 128256);
}

inline config::ModelSpec mixtral_8x7b() {
  config::ModelSpec m = llama(32, 4096, 32, 8, 14336, 32000);
  m.arch = config::Arch::Mixtral;
  m.seq_len = 4096;
  m.moe = config::MoeSpec{8, 2, 1.25, 0.01};
  return m;
}

}  // namespace ptrain::test
