// Checkpoints read and write host memory: ShardMirror copies a device backend's shards out and
// back (here the CPU ops under a device's name), and passes host shards through untouched.
#include <catch2/catch.hpp>

#include <vector>

#include "engine/train/shard_mirror.h"
#include "tests/pretend_device_ops.h"

using namespace ptrain;

TEST_CASE("host staging copies device shards out and back, and passes host shards through") {
  std::vector<float> params(10), moments(10, 0.0f);
  for (int i = 0; i < 10; ++i) params[static_cast<size_t>(i)] = static_cast<float>(i);
  const model::FlatShard shard{{20, 30}, params.data(), moments.data(), nullptr};

  train::ShardMirror host(kernels::cpu_ops(), {shard});
  CHECK(host.host()[0].params == params.data());  // CPU: the shard itself

  test::PretendDeviceOps device;
  train::ShardMirror staged(device, {shard});
  const model::FlatShard& h = staged.host()[0];
  REQUIRE(h.params != params.data());
  CHECK(h.exp_avg_sq == nullptr);
  CHECK(h.range.begin == 20);
  staged.download();
  CHECK(h.params[7] == 7.0f);
  h.exp_avg[3] = 5.0f;
  staged.upload();
  CHECK(moments[3] == 5.0f);
  CHECK(device.copies_out == 2);  // params and exp_avg; no exp_avg_sq
  CHECK(device.copies_in == 2);
}

TEST_CASE("a copy of its own, for a save written while training goes on (checkpoint.async)") {
  std::vector<float> params(10, 1.0f), moments(10, 2.0f);
  const model::FlatShard shard{{0, 10}, params.data(), moments.data(), nullptr};
  for (const bool device : {false, true}) {
    params[4] = 1.0f;
    test::PretendDeviceOps pretend;
    const kernels::Ops& memory = device ? static_cast<const kernels::Ops&>(pretend) : kernels::cpu_ops();
    train::ShardMirror copy(memory, {shard}, train::ShardMirror::Copy::Always);
    const model::FlatShard& h = copy.host()[0];
    REQUIRE(h.params != params.data());  // on the CPU too
    CHECK(h.exp_avg_sq == nullptr);
    CHECK(copy.host_bytes() == 2 * 10 * sizeof(float));
    copy.download();
    params[4] = 9.0f;  // training goes on: the copy keeps the values of the save
    CHECK(h.params[4] == 1.0f);
    CHECK(h.exp_avg[4] == 2.0f);
    CHECK(copy.mirrors({shard}));
    CHECK_FALSE(copy.mirrors({{{0, 10}, params.data(), nullptr, nullptr}}));
    CHECK_FALSE(copy.mirrors({}));
  }
}
