// The compute stream's waits by axis: each group's waits land on its axis (the KV-head copies' on
// tp, the tied embedding's on pp, the experts' dp groups on dp), waits recorded before the mark
// (the last update, an evaluation) and waits on groups the step does not use count nowhere.
#include "engine/train/axis_accounting.h"

#include <catch2/catch.hpp>

using namespace ptrain;

TEST_CASE("device waits are summed by axis from the mark on") {
  std::vector<dist::Group> g(9);
  for (int i = 0; i < 9; ++i) g[i].id = i, g[i].ranks = {0, 1}, g[i].index = 0;
  dist::ParallelGroups groups;
  groups.dp = &g[1], groups.tp = &g[2], groups.kv_copies = &g[3], groups.cp = &g[4], groups.ep = &g[5];
  groups.expert_dp = &g[6], groups.pp = &g[7], groups.embedding = &g[8];
  const std::vector<dist::Comm::DeviceWait> waits = {
      {10, 7, 100.0},  // before the mark: the last update's
      {11, 0, 200.0},  // the world group: no axis
      {12, 2, 1.0},   {13, 3, 2.0}, {14, 7, 4.0}, {15, 8, 8.0}, {16, 1, 16.0},
      {17, 6, 32.0},  {18, 4, 64.0}, {19, 5, 128.0}, {20, 2, 0.5},
  };
  const train::PerAxis w = train::device_waits(waits, 12, groups);
  CHECK(w.tp == 3.5);
  CHECK(w.pp == 12.0);
  CHECK(w.dp == 48.0);
  CHECK(w.cp == 64.0);
  CHECK(w.ep == 128.0);

  // A rank without the groups (pp 1, no experts): their waits, had there been any, count nowhere.
  dist::ParallelGroups dense;
  dense.dp = &g[1];
  const train::PerAxis d = train::device_waits(waits, 0, dense);
  CHECK(d.dp == 16.0);
  CHECK(d.tp + d.pp + d.cp + d.ep == 0.0);
}
