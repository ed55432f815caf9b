// cuDNN accepts ptrain's attention graphs (kernels/cuda/cudnn_attention.h) on an H100 described in JSON
// (h100_device_properties.json; cuDNN's device-less mode, no GPU needed): for the shapes training
// uses (GPT-2's MHA at D 64, Llama's GQA at D 128, MQA, sequence lengths no multiple of a tile, context
// parallelism's later query chunks) the forward and both backward variants pass cuDNN's support checks
// and get engine configurations from its heuristics, and they are its fused attention engines (the
// runtime-compiled ones: for these graphs cuDNN 9.19 offers engines 1/2 forward and 6/7 backward),
// with the workspace the validate memory model assumes. What only a GPU can show, that the plans
// load and compute the right numbers, is cuda_op_tests' (tests/kernels/cuda/attention_test.cpp).
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/attention_shape.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/cudnn_graph.h"

using namespace ptrain::kernels;
using namespace ptrain::kernels::cuda;

namespace {

const cudnn::Target& h100() {
  static const cudnn::Target target = [] {
    // cuDNN's support checks open the driver library; on a machine without one the toolkit's stub
    // stands in (it loads; any real work through it fails, which these checks never do).
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      REQUIRE(dlopen(PTRAIN_CUDA_DRIVER_STUB, RTLD_NOW | RTLD_GLOBAL) != nullptr);
    }
    std::ifstream in(PTRAIN_H100_DEVICE_PROPERTIES);
    REQUIRE(in.good());
    std::stringstream json;
    json << in.rdbuf();
    return cudnn::Target::properties(json.str());
  }();
  return target;
}

struct Case {
  const char* name;
  AttentionShape shape;
};

const Case kCases[] = {
    {"GPT-2 124M (MHA, D 64, T 1024)", AttentionShape::self_attention(32, 1024, 12, 12, 64)},
    {"Llama 1.25B (GQA 4:1, D 128, T 4096)", AttentionShape::self_attention(2, 4096, 16, 4, 128)},
    {"MQA, T 200 (no multiple of a tile)", AttentionShape::self_attention(3, 200, 8, 1, 64)},
    {"a later context-parallel chunk (the mask shifted by q_pos0)", {2, 512, 1024, 512, 8, 2, 128}},
    {"a ring attention block past every key (no mask)", {2, 512, 512, 512, 8, 2, 128}},
};

bool fused_engine(const std::string& name, bool forward) {
  const char* ids[2][2] = {{"engine 6,", "engine 7,"}, {"engine 1,", "engine 2,"}};
  for (const char* id : ids[forward ? 1 : 0]) {
    if (name.rfind(id, 0) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("cuDNN offers its fused attention engines for the forward on an H100", "[cudnn]") {
  for (const Case& c : kCases) {
    INFO(c.name);
    const auto candidates = attention_forward_graph(c.shape).graph.candidates(h100());
    REQUIRE_FALSE(candidates.empty());
    INFO(candidates.front().name);
    CHECK(fused_engine(candidates.front().name, true));
    CHECK(candidates.front().workspace_bytes <= 4096);
  }
}

TEST_CASE("cuDNN offers its fused attention engines for both backward variants on an H100", "[cudnn]") {
  for (const Case& c : kCases) {
    const AttentionShape& s = c.shape;
    for (const bool deterministic : {false, true}) {
      INFO(c.name << (deterministic ? ", deterministic" : ", fast"));
      const AttentionBackwardGraph b = attention_backward_graph(s, deterministic);
      CHECK((b.d_q_accum == 0) == deterministic);
      const auto candidates = b.graph.candidates(h100());
      REQUIRE_FALSE(candidates.empty());
      INFO(candidates.front().name << ", workspace " << candidates.front().workspace_bytes);
      CHECK(fused_engine(candidates.front().name, false));
      // The workspace: the deterministic variant stages dP (B*Hq*Tq*Tk BF16); with GQA cuDNN sums dK
      // and dV over each group from per-query-head copies (2 * B*Hq*Tk*D BF16).
      const std::int64_t gqa = s.Hq == s.Hkv ? 0 : 2 * std::int64_t{s.B} * s.Hq * s.Tk * s.D * 2;
      const std::int64_t dp = deterministic ? std::int64_t{s.B} * s.Hq * s.Tq * s.Tk * 2 : 0;
      CHECK(candidates.front().workspace_bytes >= gqa + dp);
      CHECK(candidates.front().workspace_bytes <= gqa + dp + (std::int64_t{8} << 20));
    }
  }
}

TEST_CASE("a head dim cuDNN's fused attention does not take gets no engine, and says so", "[cudnn]") {
  const AttentionBackwardGraph b =
      attention_backward_graph(AttentionShape::self_attention(1, 64, 2, 2, 1000), false);
  CHECK(b.graph.candidates(h100()).empty());
  CHECK_THROWS_WITH(b.graph.build(h100()), Catch::Contains("cuDNN has no engine for this graph"));
}

TEST_CASE("the mask a shape needs: causal, shifted by q_pos0 (one plan for every offset), or none") {
  CHECK(attention_mask(AttentionShape::self_attention(2, 128, 4, 2, 64)) == AttentionMask::Causal);
  CHECK(attention_mask({2, 128, 512, 384, 4, 2, 64}) == AttentionMask::Shifted);
  CHECK(attention_mask({2, 128, 512, 100, 4, 2, 64}) == AttentionMask::Shifted);
  CHECK(attention_mask({2, 128, 512, 511, 4, 2, 64}) == AttentionMask::None);  // row 0 sees key 511, the last
  CHECK(attention_mask({2, 128, 512, 512, 4, 2, 64}) == AttentionMask::None);
  // A shifted graph takes q_pos0 at each run; the others have no shift.
  CHECK(attention_forward_graph({2, 128, 512, 384, 4, 2, 64}).q_pos0 != 0);
  CHECK(attention_backward_graph({2, 128, 512, 384, 4, 2, 64}, false).q_pos0 != 0);
  CHECK(attention_forward_graph(AttentionShape::self_attention(2, 128, 4, 2, 64)).q_pos0 == 0);
  CHECK(attention_forward_graph({2, 128, 512, 512, 4, 2, 64}).q_pos0 == 0);
}
