// The memory limit every fit check applies (memory_limit.h): a GPU rank against its device, CPU
// ranks against the host a node's ranks share, alike in validate's estimate, the nearest layout
// that fits and plan's search.
#include "engine/plan/memory_limit.h"

#include <catch2/catch.hpp>
#include <cstdio>

#include "engine/plan/estimate.h"
#include "engine/plan/search.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

namespace {

// About 2.2 GB a rank (fp32, 135 M parameters, 16 bytes each before ZeRO), two ranks a host.
const char* const kCpuPair = R"(
name: cpu-pair
backend: cpu
model: {arch: llama, layers: 8, hidden: 1024, heads: 8, kv_heads: 8, ffn_hidden: 4096, vocab: 1000, seq_len: 128}
parallel: {tp: 1, pp: 1, dp: auto}
schedule: {kind: 1f1b}
train: {global_batch: 16, micro_batch: 1, precision: fp32, recompute: none}
cluster: {nodes: 1, gpus_per_node: 2, gpu: cpu}
)";

const plan::HardwareProfile& cpu() {
  return *plan::find_hardware("cpu");
}

// cluster.host_memory_gb for a host that holds 1.4 ranks of kCpuPair at ZeRO 0: one, not two.
std::string host_for_one_and_a_half_ranks() {
  const plan::Estimate one = plan::estimate(test::load_job(kCpuPair, {}, 1), cpu());
  REQUIRE(one.diags.ok());
  char text[64];
  std::snprintf(text, sizeof text, "cluster.host_memory_gb=%.3f", 1.4 * one.peak_memory_bytes() / 1e9);
  return text;
}

}  // namespace

TEST_CASE("a GPU rank has its device to itself, CPU ranks share a node's host") {
  const config::LoadResult gpu = test::load_job(test::kSmallLlama);
  const plan::MemoryLimit device = plan::memory_limit(gpu.spec, *plan::find_hardware("h100-sxm"));
  CHECK(device.bytes == 80e9);
  CHECK(device.ranks == 1);
  CHECK_FALSE(device.host);
  // Without cluster.host_memory_gb, the cpu profile's memory; a node's ranks, at most the world.
  const plan::MemoryLimit host =
      plan::memory_limit(test::load_job(kCpuPair, {"cluster.gpus_per_node=8"}, 4).spec, cpu());
  CHECK(host.bytes == cpu().memory_bytes);
  CHECK(host.ranks == 4);
  CHECK(host.host);
  const plan::MemoryLimit given =
      plan::memory_limit(test::load_job(kCpuPair, {"cluster.host_memory_gb=100"}).spec, cpu());
  CHECK(given.bytes == 100e9);
  CHECK(given.ranks == 2);
  // On the host an offloaded optimizer state is in the same memory.
  const plan::MemoryBreakdown m{1, 2, 3, 4, 5, 6};
  CHECK(given.rank_bytes(m) == 21);
  CHECK(device.rank_bytes(m) == 15);
}

TEST_CASE("validate checks the ranks that share a host together, with the fix") {
  // Issue 45: two ranks of 16.5 GiB each on a 23 GiB machine were valid, each checked alone.
  const std::string host = host_for_one_and_a_half_ranks();
  const plan::Estimate one = plan::estimate(test::load_job(kCpuPair, {host}, 1), cpu());
  CHECK(one.diags.ok());
  const config::LoadResult pair = test::load_job(kCpuPair, {host, "parallel.zero=0"});
  const plan::Estimate two = plan::estimate(pair, cpu());
  REQUIRE(two.diags.errors.size() == 1);
  const config::Diagnostic& error = two.diags.errors.front();
  INFO(error.format());
  CHECK(two.memory_limit.ranks == 2);
  CHECK(two.memory_limit_used_bytes == 2 * two.peak_memory_bytes());
  CHECK(two.memory_limit_used_bytes > two.memory_limit.bytes);
  CHECK_THAT(error.message, Catch::Contains(" per rank x 2 ranks of a node = ") &&
                                Catch::Contains(") of the host they share") &&
                                Catch::Contains("cluster.host_memory_gb"));
  CHECK_THAT(error.fix, Catch::Contains("run at most 1 rank on a node (cluster.gpus_per_node=1"));
  // The nearest layout it names fits the host, by the same check.
  REQUIRE_FALSE(two.nearest_fit.empty());
  std::vector<std::string> fixed = {host, "parallel.zero=0"};
  for (std::size_t at = two.nearest_fit.find("--set "); at != std::string::npos;
       at = two.nearest_fit.find("--set ", at + 1))
    fixed.push_back(two.nearest_fit.substr(at + 6, two.nearest_fit.find(' ', at + 6) - at - 6));
  CHECK(plan::estimate(test::load_job(kCpuPair, fixed), cpu()).diags.ok());
}

TEST_CASE("plan ranks only layouts whose node fits the host") {
  config::LoadOptions options;
  options.overrides = {host_for_one_and_a_half_ranks()};
  options.derive = false;
  config::LoadResult job = config::load_string(kCpuPair, "test.yaml", options);
  REQUIRE(job.ok());
  job.spec.world = 2;
  const plan::SearchResult result = plan::search_layouts(job, cpu(), 1 << 20);
  REQUIRE_FALSE(result.best.empty());
  const double host = job.spec.cluster.host_memory_gb * 1e9;
  for (const plan::RankedLayout& r : result.best) {
    INFO("tp " << r.layout.tp << " pp " << r.layout.pp << " zero " << r.layout.zero);
    CHECK(2 * r.estimate.peak_memory_bytes() <= host);
    CHECK(r.estimate.diags.ok());
  }
}
