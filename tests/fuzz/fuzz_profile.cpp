// libFuzzer target: arbitrary bytes as a hardware profile (`cluster.profile`, `ptrain profile`'s
// output). The reader must either refuse them with std::invalid_argument or accept a profile that
// writes back to the same file, and from which every op and collective time the cost model reads is
// a finite number of seconds, not negative (a missing table is std::invalid_argument, as for any
// job whose op the profile did not measure). Anything else (another exception, a crash, a
// sanitizer report, a NaN or infinite time) is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/plan/measured_profile.h"

namespace {

using ptrain::model::CollectiveKind;
using ptrain::model::Op;
using ptrain::model::OpKind;
namespace plan = ptrain::plan;

void require(bool ok) {
  if (!ok) __builtin_trap();
}
void require_time(double seconds) { require(std::isfinite(seconds) && seconds >= 0); }

// Ops of every kind at shapes inside, below and far above any measured grid.
std::vector<Op> probe_ops() {
  std::vector<Op> ops;
  for (const std::int64_t size : {std::int64_t{1}, std::int64_t{3}, std::int64_t{768}, std::int64_t{1} << 20}) {
    Op gemm;
    gemm.kind = OpKind::Gemm;
    gemm.gemm = {size, 2 * size + 1, size, 2};
    ops.push_back(gemm);
    Op attention;
    attention.kind = OpKind::Attention;
    attention.attention.batch = 2, attention.attention.heads = 4, attention.attention.kv_heads = 2;
    attention.attention.head_dim = size > 512 ? 128 : size;
    attention.attention.blocks = {{size, 0}, {size, size}};
    ops.push_back(attention);
    for (const OpKind kind : {OpKind::Norm, OpKind::LayerNorm, OpKind::Rope, OpKind::Activation, OpKind::Gelu,
                              OpKind::Routing, OpKind::Embedding, OpKind::Loss}) {
      Op memory;
      memory.kind = kind;
      memory.memory_bytes = static_cast<double>(size) * 1000;
      ops.push_back(memory);
    }
  }
  return ops;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  plan::MeasuredProfile profile;
  try {
    profile = plan::from_json(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // What was accepted is written back and read again unchanged.
  const std::string written = plan::to_json(profile);
  require(plan::to_json(plan::from_json(written)) == written);
  static const std::vector<Op> ops = probe_ops();
  for (const Op& op : ops) {
    for (const bool bf16 : {false, true}) {
      try {
        const plan::OpSeconds s = plan::op_seconds(profile, op, bf16);
        require_time(s.forward), require_time(s.input_grad), require_time(s.weight_grad);
      } catch (const std::invalid_argument&) {  // the profile has no table for this op
      }
    }
  }
  for (const CollectiveKind kind : {CollectiveKind::AllReduce, CollectiveKind::AllGather,
                                    CollectiveKind::ReduceScatter, CollectiveKind::AllToAll, CollectiveKind::SendRecv})
    for (const int ranks : {2, 3, 8, 1024})
      for (const double bytes : {0.0, 1.0, 4096.0, 1e9, 1e15})
        if (const auto s = plan::collective_seconds(profile, kind, ranks, bytes)) require_time(*s);
  try {
    for (const double bytes : {0.0, 64.0, 1e6, 1e12}) require_time(plan::memory_seconds(profile, "optimizer/f32", bytes, false));
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
