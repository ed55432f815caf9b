#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {

RankProgram::RankProgram(int pp, int vpp, int rank)
    : pp_(pp), vpp_(vpp), rank_(rank), prev_rank_((rank + pp - 1) % pp), next_rank_((rank + 1) % pp) {}

void RankProgram::forward(int microbatch, int chunk) {
  const int stage = chunk * pp_ + rank_;
  if (stage > 0) instrs_.push_back({Op::RecvAct, microbatch, chunk, prev_rank_});
  instrs_.push_back({Op::Forward, microbatch, chunk});
  if (stage < pp_ * vpp_ - 1) instrs_.push_back({Op::SendAct, microbatch, chunk, next_rank_});
}

void RankProgram::backward(int microbatch, int chunk) {
  const int stage = chunk * pp_ + rank_;
  if (stage < pp_ * vpp_ - 1) instrs_.push_back({Op::RecvGrad, microbatch, chunk, next_rank_});
  instrs_.push_back({Op::Backward, microbatch, chunk});
  if (stage > 0) instrs_.push_back({Op::SendGrad, microbatch, chunk, prev_rank_});
}

void RankProgram::weight_grad(int microbatch, int chunk) {
  instrs_.push_back({Op::WeightGrad, microbatch, chunk});
}

}  // namespace ptrain::pipeline::detail
