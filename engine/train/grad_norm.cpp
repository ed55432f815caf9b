#include "engine/train/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ptrain::train {

GradNorm::GradNorm(const model::ParamStore& store, parallel::DataParallel& data_parallel, const kernels::Ops& ops,
                   dist::Comm& comm, GradNormGroups groups)
    : data_parallel_(data_parallel),
      ops_(ops),
      comm_(comm),
      groups_(groups),
      pieces_(pieces(store)),
      piece_sums_(ops, static_cast<int>(pieces_.size())) {
  if (groups.data == nullptr) throw std::logic_error("GradNorm: the dp-cp group is required");
}

std::vector<GradNorm::Piece> GradNorm::pieces(const model::ParamStore& store) const {
  const model::ShardCoords& at = store.coords();
  std::vector<Piece> out;
  for (int u = 0; u < static_cast<int>(store.units().size()); ++u) {
    if (groups_.embedding_copy && u == store.embedding_unit()) continue;  // counted once, on the first stage
    const model::FlatRange owned = data_parallel_.owned_range(u);
    // Every element of tp rank 0 is a first copy, and the experts' units of every rank are distinct
    // (split over ep ranks, which may be the tp group).
    if (at.tp_rank == 0 || store.expert_unit(u)) {
      out.push_back({u, 0, owned.size()});
      continue;
    }
    for (const model::ParamSlot& slot : store.slots()) {
      if (slot.unit != u || !model::first_tp_copy(*slot.local.info, at.tp_rank, at.tp)) continue;
      const std::int64_t begin = std::max(slot.offset, owned.begin);
      const std::int64_t end = std::min(slot.offset + slot.numel, owned.end);
      if (begin >= end) continue;
      if (!out.empty() && out.back().unit == u && out.back().offset + out.back().length == begin - owned.begin)
        out.back().length += end - begin;  // adjacent first copies: one sum
      else
        out.push_back({u, begin - owned.begin, end - begin});
    }
  }
  return out;
}

double GradNorm::compute() {
  data_parallel_.finish_reductions();
  for (int i = 0; i < piece_sums_.size(); ++i) {
    const Piece& p = pieces_[static_cast<std::size_t>(i)];
    ops_.sum_squares(piece_sums_.at(i), {data_parallel_.owned_grads(p.unit) + p.offset, kernels::DType::F32},
                     p.length);
  }
  double sum = pieces_.empty() ? 0.0 : piece_sums_.read_sum(piece_sums_.size());
  comm_.all_reduce(*groups_.data, &sum, 1);
  if (groups_.tensor != nullptr) comm_.all_reduce(*groups_.tensor, &sum, 1);
  if (groups_.stages != nullptr) comm_.all_reduce(*groups_.stages, &sum, 1);
  return std::sqrt(sum);
}

float GradNorm::clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

}  // namespace ptrain::train
