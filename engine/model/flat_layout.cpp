#include "engine/model/flat_layout.h"

#include <stdexcept>

namespace ptrain::model {
namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The unit a parameter belongs to as an ordering key: -1 the embedding, 2 * layer for a layer (2 *
// layer + 1 for its experts when they are apart), the final norm and the head 1 << 30.
int unit_key(const ParamInfo& info, bool experts_apart) {
  switch (info.placement) {
    case Placement::Embedding:
      return -1;
    case Placement::Layer:
      return 2 * info.layer + (experts_apart && info.expert >= 0 ? 1 : 0);
    case Placement::FinalNorm:
    case Placement::Head:
      return 1 << 30;
  }
  return 0;
}

}  // namespace

FlatLayout flat_layout(const std::vector<LocalParam>& local, std::int64_t dense_multiple,
                       std::int64_t expert_multiple, bool experts_apart) {
  for (const std::int64_t m : {dense_multiple, expert_multiple})
    if (m < 1 || m % kFlatAlignment != 0)
      throw std::invalid_argument("flat_layout: unit multiples must be positive multiples of kFlatAlignment (16)");
  FlatLayout l;
  std::int64_t offset = 0;
  int current_key = 0;
  auto close_unit = [&] {  // its size a multiple of its kind's (not its end: the two kinds' differ)
    FlatRange& unit = l.units.back();
    offset = unit.begin + round_up(offset - unit.begin, l.expert.back() ? expert_multiple : dense_multiple);
    unit.end = offset;
  };
  for (const LocalParam& p : local) {
    const int key = unit_key(*p.info, experts_apart);
    if (l.units.empty() || key != current_key) {  // a new unit starts
      if (!l.units.empty()) close_unit();
      const int u = l.count();
      l.units.push_back({offset, offset});
      l.expert.push_back(experts_apart && p.info->expert >= 0);
      l.chunk.push_back(p.info->placement == Placement::Layer ? p.chunk : -1);
      if (p.info->placement == Placement::Embedding)
        l.embedding = u;
      else if (p.info->placement != Placement::Layer)
        l.final = u;
      current_key = key;
    }
    l.offsets.push_back(offset);
    l.tensor_unit.push_back(l.count() - 1);
    l.tied = l.tied || p.info->tied_head;
    offset += round_up(p.numel(), kFlatAlignment);  // 64-byte aligned starts for vector loads
  }
  if (!l.units.empty()) close_unit();
  l.numel = offset;
  return l;
}

}  // namespace ptrain::model
