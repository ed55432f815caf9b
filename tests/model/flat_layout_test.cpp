// The flat layout (model/flat_layout.h), which ParamStore allocates and validate counts, against
// offsets worked out by hand for a small made-up rank.
#include "engine/model/flat_layout.h"

#include <catch2/catch.hpp>
#include <stdexcept>

using namespace ptrain;
using model::FlatLayout;
using model::FlatRange;
using model::LocalParam;
using model::ParamInfo;
using model::Placement;

namespace {

ParamInfo tensor(const char* name, std::vector<std::int64_t> shape, Placement placement, int layer = -1,
                 int expert = -1) {
  ParamInfo p;
  p.name = name, p.shape = std::move(shape), p.placement = placement, p.layer = layer, p.expert = expert;
  return p;
}

// An embedding (30 elements, the tied head), layer 0 with a 5- and an 18-element tensor and one
// 16-element expert, and a 3-element final norm.
struct Rank {
  std::vector<ParamInfo> infos;
  std::vector<LocalParam> local;
  Rank() {
    infos = {tensor("emb", {10, 3}, Placement::Embedding), tensor("a", {5}, Placement::Layer, 0),
             tensor("b", {2, 9}, Placement::Layer, 0), tensor("e", {4, 4}, Placement::Layer, 0, 0),
             tensor("norm", {3}, Placement::FinalNorm)};
    infos[0].tied_head = true;
    for (const ParamInfo& p : infos) local.push_back({&p, p.shape, p.placement == Placement::Layer ? 1 : 0});
  }
};

bool same(const FlatRange& r, std::int64_t begin, std::int64_t end) { return r.begin == begin && r.end == end; }

}  // namespace

TEST_CASE("flat layout: 16-element starts, units padded to their kind's multiple, experts apart after their layer") {
  const Rank rank;
  const FlatLayout l = model::flat_layout(rank.local, 64, 32, true);
  // emb 0..30 -> unit [0, 64); a at 64 (5 -> 16), b at 80 (18 -> 32), unit [64, 128) (48 -> 64);
  // the expert apart at 128, unit [128, 160) (16 -> 32); the norm at 160, unit [160, 224).
  CHECK(l.offsets == std::vector<std::int64_t>{0, 64, 80, 128, 160});
  CHECK(l.tensor_unit == std::vector<int>{0, 1, 1, 2, 3});
  REQUIRE(l.count() == 4);
  CHECK(same(l.units[0], 0, 64));
  CHECK(same(l.units[1], 64, 128));
  CHECK(same(l.units[2], 128, 160));
  CHECK(same(l.units[3], 160, 224));
  CHECK(l.expert == std::vector<bool>{false, false, true, false});
  CHECK(l.chunk == std::vector<int>{-1, 1, 1, -1});
  CHECK(l.embedding == 0);
  CHECK(l.final == 3);
  CHECK(l.tied);
  CHECK(l.numel == 224);
}

TEST_CASE("flat layout: experts not apart stay in their layer's unit") {
  const Rank rank;
  const FlatLayout l = model::flat_layout(rank.local, 64, 32, false);
  // a at 64, b at 80, e at 112: the layer's unit [64, 128) (64); the norm's [128, 192).
  CHECK(l.offsets == std::vector<std::int64_t>{0, 64, 80, 112, 128});
  REQUIRE(l.count() == 3);
  CHECK(same(l.units[1], 64, 128));
  CHECK(same(l.units[2], 128, 192));
  CHECK(l.expert == std::vector<bool>{false, false, false});
  CHECK(l.numel == 192);
}

TEST_CASE("flat layout: unit multiples must be multiples of the alignment") {
  const Rank rank;
  CHECK_THROWS_AS(model::flat_layout(rank.local, 24, 16, true), std::invalid_argument);
  CHECK_THROWS_AS(model::flat_layout(rank.local, 16, 0, true), std::invalid_argument);
  CHECK(model::flat_layout({}, 16, 16, true).numel == 0);
}
