// Heartbeats (engine/comm/heartbeat.h): what a rank posts reads back as it was; anything else is not
// a heartbeat. (The judgement over a live job: tests/launch/test_restarts.py, HungRank.)
#include <catch2/catch.hpp>

#include "engine/comm/heartbeat.h"

namespace ptrain::dist {

TEST_CASE("a heartbeat reads back as it was posted", "[heartbeat]") {
  Heartbeat beat{41, CollectivePosition{81, "all_gather", 3, "dp-cp[0,1,2,3]", 59, -1, true}};
  const std::optional<Heartbeat> back = decode_heartbeat(encode_heartbeat(beat));
  REQUIRE(back);
  CHECK(back->count == 41);
  REQUIRE(back->at);
  CHECK(back->at->seq == 81);
  CHECK(back->at->op == "all_gather");
  CHECK(back->at->group_id == 3);
  CHECK(back->at->group == "dp-cp[0,1,2,3]");
  CHECK(back->at->group_call == 59);
  CHECK(back->at->peer == -1);
  CHECK(back->at->in_flight);

  const std::optional<Heartbeat> none = decode_heartbeat(encode_heartbeat(Heartbeat{7, std::nullopt}));
  REQUIRE(none);
  CHECK(none->count == 7);
  CHECK_FALSE(none->at);
}

TEST_CASE("text that is not a heartbeat is refused", "[heartbeat]") {
  for (const char* text : {"", "hb2 1 -", "hb1", "hb1 x", "hb1 3 81 recv"})
    CHECK_FALSE(decode_heartbeat(text));
}

}  // namespace ptrain::dist
