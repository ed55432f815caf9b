#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {

void RankProgram::forward(int microbatch, int chunk, bool opens_pair) {
  const bool first = placement_.first(rank_, chunk), last = placement_.last(rank_, chunk);
  const int prev = first ? rank_ : placement_.prev_rank(rank_, chunk);
  const int next = last ? rank_ : placement_.next_rank(rank_, chunk);
  if (prev != rank_) instrs_.push_back({Op::RecvAct, microbatch, chunk, prev});
  instrs_.push_back({Op::Forward, microbatch, chunk, -1, opens_pair});
  if (next != rank_) instrs_.push_back({Op::SendAct, microbatch, chunk, next});
}

void RankProgram::backward(int microbatch, int chunk) {
  const bool first = placement_.first(rank_, chunk), last = placement_.last(rank_, chunk);
  const int prev = first ? rank_ : placement_.prev_rank(rank_, chunk);
  const int next = last ? rank_ : placement_.next_rank(rank_, chunk);
  if (next != rank_) instrs_.push_back({Op::RecvGrad, microbatch, chunk, next});
  instrs_.push_back({Op::Backward, microbatch, chunk});
  if (prev != rank_) instrs_.push_back({Op::SendGrad, microbatch, chunk, prev});
}

void RankProgram::weight_grad(int microbatch, int chunk) {
  instrs_.push_back({Op::WeightGrad, microbatch, chunk});
}

}  // namespace ptrain::pipeline::detail
