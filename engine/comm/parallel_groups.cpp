#include "engine/comm/parallel_groups.h"

#include <stdexcept>
#include <string>

#include "engine/config/job_grid.h"

namespace ptrain::dist {

grid::GroupList kv_copy_groups(const grid::GroupList& tp_groups, int tp, int kv_heads) {
  grid::GroupList out;
  if (kv_heads >= tp) return out;
  const int sharers = tp / kv_heads;
  for (const grid::Group& g : tp_groups)
    for (std::size_t first = 0; first < g.size(); first += static_cast<std::size_t>(sharers))
      out.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(first),
                       g.begin() + static_cast<std::ptrdiff_t>(first) + sharers);
  return out;
}

ParallelGroups make_parallel_groups(const config::JobSpec& spec, Comm& comm, bool tied_head) {
  const config::ParallelSpec& p = spec.parallel;
  if (comm.world() != spec.world)
    throw std::invalid_argument("the job has " + std::to_string(spec.world) + " ranks but " +
                                std::to_string(comm.world()) + " processes were started");
  const grid::RankGrid grid = config::job_grid(spec);
  auto make = [&](const char* kind, const grid::GroupList& groups) {
    const Group* mine = nullptr;
    for (const std::vector<int>& ranks : groups) {
      std::string name = std::string(kind) + "[";
      for (std::size_t i = 0; i < ranks.size(); ++i) name += (i ? "," : "") + std::to_string(ranks[i]);
      const Group& g = comm.new_group(name + "]", ranks);
      if (g.has_me()) mine = &g;
    }
    return mine;
  };
  ParallelGroups out;
  out.dp = make("dp-cp", grid.groups("dp-cp"));
  out.pp_rank = grid.coord(comm.rank(), grid::Axis::Pp);
  out.tp_rank = grid.coord(comm.rank(), grid::Axis::Tp);
  out.dp_rank = grid.coord(comm.rank(), grid::Axis::Dp);
  if (p.tp > 1) {
    out.tp = make("tp", grid.groups("tp"));
    const grid::GroupList kv = kv_copy_groups(grid.groups("tp"), p.tp, spec.model.kv_heads);
    if (!kv.empty()) out.kv_copies = make("kv", kv);
  }
  if (p.cp > 1) out.cp = make("cp", grid.groups("cp"));
  if (p.ep > 1) {
    out.ep = make("ep", grid.expert_groups("ep"));
    out.ep_rank = grid.coord(comm.rank(), grid::Axis::Ep);
  }
  // The experts' units apart (model::experts_apart) are reduced over the expert-dp group.
  if (spec.model.moe && (p.ep > 1 || p.tp > 1)) out.expert_dp = make("expert-dp", grid.expert_groups("dp"));
  if (p.pp == 1) return out;
  out.pp = make("pp", grid.groups("pp"));
  if (tied_head) out.embedding = make("embedding", grid.embedding_groups());
  return out;
}

}  // namespace ptrain::dist
