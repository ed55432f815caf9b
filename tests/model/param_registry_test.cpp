// The parameter registry against the published parameter counts of real models, and its sharding
// (tp slices, pipeline stages, experts) against coverage properties: every element of every tensor
// lives on exactly the ranks it should.
#include "engine/model/param_registry.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "tests/model/model_specs.h"

using namespace ptrain;
using model::LocalParam;
using model::ParamInfo;
using model::Placement;
using model::ShardCoords;

namespace {

std::int64_t total(const std::vector<ParamInfo>& registry) {
  std::int64_t n = 0;
  for (const ParamInfo& p : registry) n += p.numel();
  return n;
}

const ParamInfo& find(const std::vector<ParamInfo>& registry, const std::string& name) {
  const auto it =
      std::find_if(registry.begin(), registry.end(), [&](const ParamInfo& p) { return p.name == name; });
  INFO(name);
  REQUIRE(it != registry.end());
  return *it;
}

ShardCoords coords(int tp_rank, int tp, int pp_rank, int pp, int vpp, std::vector<int> layers_per_stage,
                   int ep_rank = 0, int ep = 1) {
  ShardCoords c;
  c.tp_rank = tp_rank, c.tp = tp, c.pp_rank = pp_rank, c.pp = pp, c.vpp = vpp, c.ep_rank = ep_rank, c.ep = ep;
  c.layers_per_stage = std::move(layers_per_stage);
  return c;
}

}  // namespace

TEST_CASE("published parameter counts") {
  // HF config.json shapes; counts from the model cards / safetensors index totals.
  CHECK(total(model::build_registry(test::gpt2_124m())) == 124'439'808);
  CHECK(total(model::build_registry(test::llama3_8b())) == 8'030'261'248);
  CHECK(total(model::build_registry(test::llama3_70b())) == 70'553'706'496);
  CHECK(total(model::build_registry(test::llama31_405b())) == 405'853'388'800);
  CHECK(total(model::build_registry(test::mixtral_8x7b())) == 46'702'792'704);
}

TEST_CASE("names are unique and HF-spelled") {
  for (const config::ModelSpec& m : {test::gpt2_124m(), test::llama3_8b(), test::mixtral_8x7b()}) {
    const auto registry = model::build_registry(m);
    std::set<std::string> names;
    for (const ParamInfo& p : registry) CHECK(names.insert(p.name).second);
  }
  const auto gpt2 = model::build_registry(test::gpt2_124m());
  CHECK(find(gpt2, "wte.weight").shape == std::vector<std::int64_t>{50257, 768});
  CHECK(find(gpt2, "wpe.weight").shape == std::vector<std::int64_t>{1024, 768});
  CHECK(find(gpt2, "h.11.attn.c_attn.weight").shape == std::vector<std::int64_t>{3 * 768, 768});
  CHECK(find(gpt2, "h.0.mlp.c_proj.weight").shape == std::vector<std::int64_t>{768, 3072});
  CHECK(find(gpt2, "ln_f.bias").placement == Placement::FinalNorm);

  const auto mixtral = model::build_registry(test::mixtral_8x7b());
  CHECK(find(mixtral, "model.layers.31.block_sparse_moe.gate.weight").shape ==
        std::vector<std::int64_t>{8, 4096});
  const ParamInfo& w2 = find(mixtral, "model.layers.3.block_sparse_moe.experts.7.w2.weight");
  CHECK(w2.shape == std::vector<std::int64_t>{4096, 14336});
  CHECK(w2.expert == 7);
  CHECK(w2.tp_dim == -1);
  CHECK(find(mixtral, "lm_head.weight").placement == Placement::Head);
}

TEST_CASE("tied heads: gpt2 always, llama only with tie_embeddings") {
  const auto gpt2 = model::build_registry(test::gpt2_124m());
  CHECK(find(gpt2, "wte.weight").tied_head);
  config::ModelSpec tied = test::llama3_8b();
  tied.tie_embeddings = true;
  const auto registry = model::build_registry(tied);
  CHECK(total(registry) == 8'030'261'248 - 128256LL * 4096);
  CHECK(find(registry, "model.embed_tokens.weight").tied_head);
  for (const ParamInfo& p : registry) CHECK(p.placement != Placement::Head);
}

TEST_CASE("decay and sequence-parallel flags") {
  for (const config::ModelSpec& m : {test::gpt2_124m(), test::llama3_8b(), test::mixtral_8x7b()}) {
    for (const ParamInfo& p : model::build_registry(m)) {
      const bool norm = p.name.find("ln_") != std::string::npos || p.name.find("norm") != std::string::npos;
      const bool bias = p.name.size() > 5 && p.name.substr(p.name.size() - 5) == ".bias";
      INFO(p.name);
      CHECK(p.weight_decay == !(norm || bias));
      if (norm) CHECK(p.sequence_parallel_grad);
      if (bias && !norm) CHECK(!p.sequence_parallel_grad);  // row-parallel biases: whole gradients
      if (p.shape.size() == 1) CHECK(!p.is_matmul());
    }
  }
}

TEST_CASE("tp slices: local shapes and every row held once") {
  SECTION("gpt2: fused c_attn splits q, k and v separately") {
    const auto registry = model::build_registry(test::gpt2_124m());
    const ParamInfo& qkv = find(registry, "h.0.attn.c_attn.weight");
    CHECK(model::local_shape(qkv, 4) == std::vector<std::int64_t>{3 * 768 / 4, 768});
    const auto r1 = model::tp_row_ranges(qkv, 1, 4);
    REQUIRE(r1.size() == 3);
    CHECK(r1[0].begin == 192);
    CHECK(r1[1].begin == 768 + 192);
    CHECK(r1[2].begin == 2 * 768 + 192);
    CHECK(model::local_shape(find(registry, "h.0.attn.c_proj.weight"), 4) ==
          std::vector<std::int64_t>{768, 192});
    CHECK(model::local_shape(find(registry, "h.0.attn.c_proj.bias"), 4) == std::vector<std::int64_t>{768});
  }
  SECTION("sum over tp ranks of split tensors is the global tensor, rows covered exactly once") {
    for (const int tp : {1, 2, 4, 8}) {
      for (config::ModelSpec m : {test::gpt2_124m(), test::llama3_8b(), test::mixtral_8x7b()}) {
        if (m.heads % tp != 0) continue;                // config::load rejects it (gpt2: 12 heads)
        m.padded_vocab = (m.vocab + tp - 1) / tp * tp;  // as config::load pads it
        for (const ParamInfo& p : model::build_registry(m)) {
          if (p.tp_dim < 0 || p.layer > 1) continue;  // layers repeat; two are enough
          std::int64_t sum = 0;
          std::vector<int> hits(static_cast<size_t>(p.shape[static_cast<size_t>(p.tp_dim)]), 0);
          for (int r = 0; r < tp; ++r) {
            const auto shape = model::local_shape(p, tp);
            sum += shape[0] * (shape.size() > 1 ? shape[1] : 1);
            for (const auto& range : model::tp_row_ranges(p, r, tp))
              for (auto i = range.begin; i < range.begin + range.length; ++i) ++hits[static_cast<size_t>(i)];
          }
          INFO(p.name << " tp " << tp);
          CHECK(sum == p.numel());
          if (p.tp_dim == 0) CHECK(std::set<int>(hits.begin(), hits.end()) == std::set<int>{1});
        }
      }
    }
  }
  SECTION("fewer kv heads than tp ranks: whole heads, replicated") {
    const auto registry = model::build_registry(test::llama31_405b());  // g = 8, d = 128
    const ParamInfo& k = find(registry, "model.layers.0.self_attn.k_proj.weight");
    CHECK(model::local_shape(k, 8) == std::vector<std::int64_t>{128, 16384});
    CHECK(model::local_shape(k, 16) == std::vector<std::int64_t>{128, 16384});  // max(8/16, 1) heads
    std::vector<int> holders(8, 0);
    for (int r = 0; r < 16; ++r) {
      const auto ranges = model::tp_row_ranges(k, r, 16);
      REQUIRE(ranges.size() == 1);
      CHECK(ranges[0].length == 128);
      CHECK(ranges[0].begin % 128 == 0);
      ++holders[static_cast<size_t>(ranges[0].begin / 128)];
      CHECK(ranges[0].begin / 128 == r / 2);  // ranks 2h and 2h+1 share kv head h
    }
    CHECK(std::set<int>(holders.begin(), holders.end()) == std::set<int>{2});
    CHECK(model::local_shape(find(registry, "model.layers.0.self_attn.q_proj.weight"), 16) ==
          std::vector<std::int64_t>{128 * 128 / 16, 16384});
  }
}

TEST_CASE("tp block runs are the rank's blocks, element for element, cut anywhere") {
  // Small shapes (every element enumerated): gpt2's fused c_attn (3 parts along dim 0), a dim-1 split
  // (c_proj), replicated norms; cut at the ends, mid-row and mid-part.
  config::ModelSpec m = test::gpt2_124m();
  m.hidden = 48, m.heads = 4, m.kv_heads = 4, m.ffn_hidden = 192, m.vocab = m.padded_vocab = 100, m.layers = 1;
  for (const int tp : {1, 2, 4}) {
    for (const ParamInfo& p : model::build_registry(m)) {
      for (int r = 0; r < tp; ++r) {
        std::vector<std::int64_t> blocks;  // global flat index of each local element
        model::for_each_tp_block(p, r, tp, [&](std::int64_t start, std::int64_t length) {
          for (std::int64_t i = 0; i < length; ++i) blocks.push_back(start + i);
        });
        const auto n = static_cast<std::int64_t>(blocks.size());
        for (const auto& [lo, hi] : {std::pair<std::int64_t, std::int64_t>{0, n}, {7, n - 5}, {n / 3, n / 2}, {n - 1, n}}) {
          INFO(p.name << " tp " << tp << " rank " << r << " [" << lo << ", " << hi << ")");
          std::vector<std::int64_t> runs(static_cast<std::size_t>(n), -1);
          std::int64_t next = lo;
          const auto got = model::tp_block_runs(p, r, tp, lo, hi);
          for (const model::TpBlockRun& run : got) {
            REQUIRE(run.local == next);  // back to back from lo
            for (std::int64_t row = 0; row < run.rows; ++row)
              for (std::int64_t c = 0; c < run.cols; ++c)
                runs[static_cast<std::size_t>(run.local + row * run.cols + c)] = run.global + row * run.stride + c;
            next += run.rows * run.cols;
          }
          CHECK(next == hi);
          for (std::int64_t i = lo; i < hi; ++i) REQUIRE(runs[static_cast<std::size_t>(i)] == blocks[static_cast<std::size_t>(i)]);
          if (tp > 1 && p.tp_dim == 1 && lo == 0 && hi == n) CHECK(got.size() == 1);  // a column split: one run
        }
      }
    }
  }
}

TEST_CASE("pipeline placement: every layer on exactly one stage, chunk c of rank r = virtual stage c*pp+r") {
  const auto registry = model::build_registry(test::llama3_8b());  // 32 layers
  const int pp = 4, vpp = 2;
  const std::vector<int> per_stage = {3, 4, 4, 4, 4, 4, 4, 5};  // uneven on purpose
  std::map<int, int> layer_holders;
  std::map<int, std::pair<int, int>> layer_place;  // layer -> (pp rank, chunk)
  for (int r = 0; r < pp; ++r) {
    for (const LocalParam& lp : model::local_params(registry, coords(0, 1, r, pp, vpp, per_stage))) {
      if (lp.info->placement != Placement::Layer) continue;
      if (lp.info->name.find("q_proj") != std::string::npos) ++layer_holders[lp.info->layer];
      layer_place[lp.info->layer] = {r, lp.chunk};
    }
  }
  REQUIRE(layer_holders.size() == 32);
  for (const auto& [layer, n] : layer_holders) CHECK(n == 1);
  CHECK(layer_place[0] == std::pair{0, 0});
  CHECK(layer_place[2] == std::pair{0, 0});
  CHECK(layer_place[3] == std::pair{1, 0});   // virtual stage 1
  CHECK(layer_place[14] == std::pair{3, 0});  // stage 3 holds 11..14
  CHECK(layer_place[15] == std::pair{0, 1});  // stage 4 = chunk 1 of rank 0 holds 15..18
  CHECK(layer_place[19] == std::pair{1, 1});  // stage 5
  CHECK(layer_place[31] == std::pair{3, 1});  // stage 7 holds 27..31

  const auto first = model::local_params(registry, coords(0, 1, 0, pp, vpp, per_stage));
  const auto last = model::local_params(registry, coords(0, 1, pp - 1, pp, vpp, per_stage));
  CHECK(first.front().info->name == "model.embed_tokens.weight");
  CHECK(first.front().chunk == 0);
  CHECK(last.back().info->name == "lm_head.weight");
  CHECK(last.back().chunk == vpp - 1);
  for (const LocalParam& lp : last) CHECK(lp.info->name != "model.embed_tokens.weight");
}

TEST_CASE("tied embedding: the last stage holds a copy when pp > 1") {
  const auto registry = model::build_registry(test::gpt2_124m());
  auto copies = [&](const std::string& name, const ShardCoords& c) {
    int n = 0;
    for (const LocalParam& lp : model::local_params(registry, c)) n += lp.info->name == name;
    return n;
  };
  CHECK(copies("wte.weight", coords(0, 1, 0, 1, 1, {12})) == 1);
  CHECK(copies("wte.weight", coords(0, 1, 0, 1, 2, {6, 6})) == 1);  // pp 1: both ends on one rank
  CHECK(copies("wte.weight", coords(0, 1, 0, 2, 1, {6, 6})) == 1);
  CHECK(copies("wte.weight", coords(0, 1, 1, 2, 1, {6, 6})) == 1);
  CHECK(copies("wte.weight", coords(0, 1, 1, 3, 1, {4, 4, 4})) == 0);  // a middle stage
  CHECK(copies("wpe.weight", coords(0, 1, 1, 2, 1, {6, 6})) == 0);     // positions are not tied
}

TEST_CASE("experts: every expert of every layer on exactly one ep rank") {
  const auto registry = model::build_registry(test::mixtral_8x7b());
  for (const int ep : {1, 2, 4, 8}) {
    std::map<std::pair<int, int>, int> holders;  // (layer, expert) -> ep ranks holding its w1
    std::int64_t dense_on_rank0 = -1;
    for (int e = 0; e < ep; ++e) {
      std::int64_t dense = 0;
      for (const LocalParam& lp : model::local_params(registry, coords(0, 1, 0, 1, 1, {32}, e, ep))) {
        if (lp.info->expert < 0) {
          dense += lp.numel();
          continue;
        }
        CHECK(lp.info->expert / (8 / ep) == e);
        if (lp.info->name.find(".w1.") != std::string::npos) ++holders[{lp.info->layer, lp.info->expert}];
      }
      if (dense_on_rank0 < 0) dense_on_rank0 = dense;
      CHECK(dense == dense_on_rank0);  // dense params are the same on every ep rank
    }
    CHECK(holders.size() == 32 * 8);
    for (const auto& [key, n] : holders) CHECK(n == 1);
  }
}

TEST_CASE("sum of local params over a full layout") {
  // Over (tp, ep) ranks of one pipeline: tp-split dense tensors add up once per ep rank, replicated
  // ones once per (tp, ep) rank, and every ep rank's experts are held whole by each of the tp ranks.
  const auto registry = model::build_registry(test::mixtral_8x7b());
  const int tp = 2, ep = 4, pp = 2;
  std::int64_t dense_split = 0, dense_replicated = 0, experts = 0;
  for (const ParamInfo& p : registry)
    (p.expert >= 0 ? experts : p.tp_dim >= 0 ? dense_split : dense_replicated) += p.numel();
  std::int64_t sum = 0;
  for (int r = 0; r < pp; ++r)
    for (int t = 0; t < tp; ++t)
      for (int e = 0; e < ep; ++e)
        for (const LocalParam& lp : model::local_params(registry, coords(t, tp, r, pp, 1, {16, 16}, e, ep)))
          sum += lp.numel();
  CHECK(sum == ep * dense_split + tp * ep * dense_replicated + tp * experts);
}
