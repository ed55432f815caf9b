// What `ptrain profile` doubts in what it measured (issue 44 item 2): the shipped profiles, measured
// on quiet machines, pass; the busy machine's quick profile of the issue (attention 16.1 ms at seq 64
// against 12.0 ms at 512, calibration x0.69) and each kind of noise, injected into the shipped CPU
// profile, fail at the table they are in; a doubt written into a profile is read back.
#include "engine/plan/profile_doubts.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <catch2/catch.hpp>

using namespace ptrain;
using Catch::Matchers::Contains;

namespace {

plan::MeasuredProfile shipped(const std::string& name) {
  std::ifstream in(std::string(PTRAIN_SOURCE_DIR) + "/profiles/" + name);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return plan::from_json(text.str());
}

std::vector<std::string> tables(const std::vector<plan::ProfileDoubt>& doubts) {
  std::vector<std::string> out;
  for (const plan::ProfileDoubt& d : doubts) out.push_back(d.table);
  return out;
}

}  // namespace

TEST_CASE("the shipped profiles, measured on quiet machines, raise no doubt") {
  for (const char* name : {"cpu.json", "h100-sxm.json", "h200.json", "h100-sxm-own-attention.json"}) {
    INFO(name);
    CHECK(plan::profile_doubts(shipped(name), {}).empty());
  }
}

TEST_CASE("the busy machine's attention and calibration of the issue are doubted") {
  plan::MeasuredProfile p = shipped("cpu.json");
  plan::AttentionTable& a = p.attention.at("f32").front();  // head_dim 64
  a.seq = {64, 512};  // as --quick measures it
  a.forward_s = {16.1e-3, 12.0e-3};
  a.backward_s = {a.backward_s.front(), a.backward_s.back()};
  p.calibration->compute_scale = 0.69;
  const std::vector<plan::ProfileDoubt> doubts = plan::profile_doubts(p, {});
  REQUIRE(tables(doubts) == std::vector<std::string>{"attention/f32", "calibration"});
  CHECK_THAT(doubts[0].text(), Contains("attention/f32: forward (head_dim 64) takes 16.10 ms at seq 64 but "
                                        "12.00 ms at seq 512: more work, 1.3x faster"));
  CHECK_THAT(doubts[1].why, Contains("(x0.69)"));
}

TEST_CASE("a table that falls where the work rises is doubted, by table") {
  plan::MeasuredProfile p = shipped("cpu.json");
  SECTION("a GEMM along m") {
    plan::GemmTable& g = p.gemm.at("f32");  // m, n, k: 32, 128, 512, 2048
    const std::size_t last_m = (g.m.size() - 1) * g.n.size() * g.k.size();
    g.weight_grad_s[last_m] = g.weight_grad_s[last_m - g.n.size() * g.k.size()] / 2;
    CHECK(tables(plan::profile_doubts(p, {})) == std::vector<std::string>{"gemm/f32"});
  }
  SECTION("a memory-bound family") {
    std::vector<plan::MemoryPoint>& norm = p.memory.at("norm/bf16");
    norm.back().backward_s = norm.front().backward_s / 2;
    CHECK(tables(plan::profile_doubts(p, {})) == std::vector<std::string>{"norm/bf16"});
  }
  SECTION("a collective") {
    auto& points = p.collectives->points.at("all_reduce");
    points[3].second = points[2].second / 1.5;
    CHECK(tables(plan::profile_doubts(p, {})) == std::vector<std::string>{"collectives/all_reduce"});
  }
  SECTION("but not GELU's table, the difference of two GEMMs, noise at small sizes by construction") {
    std::vector<plan::MemoryPoint>& gelu = p.memory.at("gelu/f32");
    gelu.back().forward_s = gelu.front().forward_s / 10;
    CHECK(plan::profile_doubts(p, {}).empty());
  }
  SECTION("nor a dip within the slack") {
    plan::AttentionTable& a = p.attention.at("bf16").back();
    a.backward_s[1] = a.backward_s[0] / (plan::kMonotoneSlack - 0.05);
    CHECK(plan::profile_doubts(p, {}).empty());
  }
}

TEST_CASE("a GPU's tables may fall where the work rises: cuBLAS picks algorithms by shape") {
  plan::MeasuredProfile p = shipped("h100-sxm.json");
  plan::GemmTable& g = p.gemm.at("bf16");
  g.forward_s[1] = g.forward_s[0] / 5;
  CHECK(plan::profile_doubts(p, {}).empty());
  p.calibration->compute_scale = 1.6;  // the calibration is checked on every device
  CHECK(tables(plan::profile_doubts(p, {})) == std::vector<std::string>{"calibration"});
}

TEST_CASE("repeats that disagree beyond the limit are doubted") {
  const plan::MeasuredProfile p = shipped("cpu.json");
  CHECK(plan::profile_doubts(p, {{"gemm/f32", 1.9}, {"norm/f32", 1.2}}).empty());
  const std::vector<plan::ProfileDoubt> doubts = plan::profile_doubts(p, {{"gemm/f32", 2.6}, {"norm/f32", 1.2}});
  REQUIRE(tables(doubts) == std::vector<std::string>{"gemm/f32"});
  CHECK_THAT(doubts[0].why, Contains("differ by 2.6x"));
}

TEST_CASE("a profile keeps its doubts through its file") {
  plan::MeasuredProfile p = shipped("cpu.json");
  CHECK(p.doubts.empty());
  p.doubts = {"calibration: the reference step computed for 49 ms where the tables predict 71 ms (x0.69)"};
  CHECK(plan::from_json(plan::to_json(p)).doubts == p.doubts);
  std::string text = plan::to_json(p);
  text.replace(text.find("\"doubts\""), 8, "\"doubts\": 3, \"was\"");
  CHECK_THROWS_WITH(plan::from_json(text), Contains("profile field doubts: must be a list of sentences"));
}
