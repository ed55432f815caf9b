// runtime::DeviceInterval: the device's seconds between its two markers where the backend keeps a
// timeline (here PretendDeviceOps, whose markers are host clock readings), none on the CPU, and
// every marker given back.
#include "engine/runtime/device_interval.h"

#include <catch2/catch.hpp>
#include <chrono>

#include "tests/pretend_device_ops.h"

using ptrain::runtime::DeviceInterval;

TEST_CASE("a device interval is the device's seconds between its markers, and gives them back") {
  const ptrain::test::PretendDeviceOps device;
  {
    DeviceInterval interval(device);
    CHECK_FALSE(interval.seconds().has_value());  // not ended
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
    while (std::chrono::steady_clock::now() < until) {
    }
    interval.end();
    interval.end();  // once is what counts
    REQUIRE(interval.seconds().has_value());
    CHECK(*interval.seconds() >= 0.003);
    CHECK(device.live_markers() == 2);
  }
  CHECK(device.live_markers() == 0);
  { const DeviceInterval never_ended(device); }
  CHECK(device.live_markers() == 0);
}

TEST_CASE("on the CPU there is no device interval: the host's clock is the device's") {
  DeviceInterval interval(ptrain::kernels::cpu_ops());
  interval.end();
  CHECK_FALSE(interval.seconds().has_value());
}
