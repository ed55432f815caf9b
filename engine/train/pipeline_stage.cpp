#include "engine/train/pipeline_stage.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ptrain::train {
namespace {

constexpr int kActivations = 0, kGradients = 1;  // channels (pipeline/schedule.h)

std::size_t index(int i) { return static_cast<std::size_t>(i); }

// The most microbatches chunk `chunk` holds between their F and B in `list` (list order is
// execution order).
int slots_needed(const std::vector<pipeline::Instr>& list, int chunk) {
  int open = 0, most = 1;
  for (const pipeline::Instr& in : list) {
    if (in.chunk != chunk) continue;
    if (in.op == pipeline::Op::Forward) most = std::max(most, ++open);
    if (in.op == pipeline::Op::Backward) --open;
  }
  return most;
}

// ZeRO stages 0 and 1 reduce a unit after its last microbatch's backward: every chunk's last B must
// be that of the last microbatch.
void check_backward_order(const pipeline::Schedule& s, int pp_rank) {
  std::vector<int> last(index(s.vpp), -1);
  for (const pipeline::Instr& in : s.ranks[index(pp_rank)])
    if (in.op == pipeline::Op::Backward) last[index(in.chunk)] = in.microbatch;
  for (int mb : last)
    if (mb != s.microbatches - 1)
      throw std::logic_error("pipeline schedule: a chunk's last backward is not the last microbatch's");
}

}  // namespace

PipelineStage::PipelineStage(const config::JobSpec& spec, model::ParamStore& params, const kernels::Ops& ops,
                             dist::Comm& comm, const dist::Group* pp_group, int microbatches)
    : comm_(comm),
      pp_group_(pp_group),
      pp_rank_(pp_group != nullptr ? pp_group->index : 0),
      pp_(spec.parallel.pp),
      ops_(ops),
      schedule_(pipeline::build(spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages, microbatches)) {
  if (schedule_.split_weight_grad)
    throw std::invalid_argument("schedule.kind " + std::string(config::to_string(spec.schedule.kind)) +
                                ": the engine does not split weight gradients from input gradients yet; "
                                "use 1f1b, interleaved-1f1b or gpipe");
  if ((pp_group == nullptr ? 1 : pp_group->size()) != pp_)
    throw std::logic_error("PipelineStage: the pp group does not have parallel.pp ranks");
  check_backward_order(schedule_, pp_rank_);
  const std::vector<pipeline::Instr>& list = schedule_.ranks[index(pp_rank_)];
  for (int c = 0; c < schedule_.vpp; ++c) {
    const int slots = slots_needed(list, c);
    chunks_.push_back(std::make_unique<model::Transformer>(spec, params, ops, slots, c));
    slot_of_.emplace_back(index(microbatches), -1);
    free_slots_.emplace_back();
    for (int s = slots - 1; s >= 0; --s) free_slots_.back().push_back(s);
    const model::Transformer& chunk = *chunks_.back();
    grad_messages_.emplace_back();
    if (!chunk.first_stage())
      grad_messages_.back() = runtime::Buffer(ops, chunk.boundary_elements() * microbatches, chunk.activation_dtype());
  }
  const std::size_t tokens = static_cast<std::size_t>(spec.train.micro_batch) * static_cast<std::size_t>(spec.model.seq_len);
  tokens_.resize(tokens);
  targets_.resize(tokens);
}

PipelineStage::~PipelineStage() = default;

void PipelineStage::set_hooks(model::UnitHooks* hooks) {
  for (auto& chunk : chunks_) chunk->set_hooks(hooks);
}

std::int64_t PipelineStage::activation_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& chunk : chunks_) bytes += chunk->activation_bytes();
  for (const runtime::Buffer& b : grad_messages_) bytes += static_cast<std::int64_t>(b.bytes());
  return bytes;
}

int PipelineStage::prev_rank() const { return (pp_rank_ + pp_ - 1) % pp_; }
int PipelineStage::next_rank() const { return (pp_rank_ + 1) % pp_; }

void PipelineStage::train(const MicrobatchLoader& load, float grad_scale, const runtime::DeviceScalars& loss_sums,
                          optim::ZeroOptimizer& zero) {
  using pipeline::Op;
  const int micro = schedule_.microbatches;
  std::vector<std::vector<dist::Comm::SendHandle>> act_sends(index(schedule_.vpp)), grad_sends(index(schedule_.vpp));
  for (auto& v : act_sends) v.resize(index(micro));
  for (auto& v : grad_sends) v.resize(index(micro));
  auto acquire = [&](int c, int mb) {
    std::vector<int>& free = free_slots_[index(c)];
    if (free.empty()) throw std::logic_error("pipeline: no free activation slot (slots_needed is wrong)");
    slot_of_[index(c)][index(mb)] = free.back();
    free.pop_back();
    return slot_of_[index(c)][index(mb)];
  };
  for (const pipeline::Instr& in : schedule_.ranks[index(pp_rank_)]) {
    model::Transformer& chunk = *chunks_[index(in.chunk)];
    int& slot = slot_of_[index(in.chunk)][index(in.microbatch)];
    const std::size_t bytes = chunk.boundary_bytes();
    switch (in.op) {
      case Op::RecvAct:
        comm_.recv(*pp_group_, chunk.input(acquire(in.chunk, in.microbatch)).ptr, bytes, in.peer, kActivations);
        break;
      case Op::Forward:
        if (chunk.first_stage()) acquire(in.chunk, in.microbatch);
        if (chunk.first_stage() || chunk.last_stage()) load(in.microbatch, tokens_.data(), targets_.data());
        chunk.forward(slot, tokens_.data(), targets_.data(), grad_scale,
                      chunk.last_stage() ? loss_sums.at(in.microbatch) : kernels::Buf{});
        break;
      case Op::SendAct:
        act_sends[index(in.chunk)][index(in.microbatch)] =
            comm_.isend(*pp_group_, chunk.output(slot).ptr, bytes, in.peer, kActivations);
        break;
      case Op::RecvGrad:
        comm_.recv(*pp_group_, chunk.output_grad(slot).ptr, bytes, in.peer, kGradients);
        break;
      case Op::Backward: {
        zero.begin_microbatch(in.microbatch);
        chunk.backward(slot);
        act_sends[index(in.chunk)][index(in.microbatch)].wait();  // the slot's output is free again
        free_slots_[index(in.chunk)].push_back(slot);
        slot = -1;
        break;
      }
      case Op::SendGrad: {  // right after its B: input_grad() is this microbatch's
        const kernels::Buf message = grad_messages_[index(in.chunk)].at(chunk.boundary_elements() * in.microbatch);
        ops_.convert(message, chunk.input_grad(), chunk.boundary_elements());
        grad_sends[index(in.chunk)][index(in.microbatch)] =
            comm_.isend(*pp_group_, message.ptr, bytes, in.peer, kGradients);
        break;
      }
      case Op::WeightGrad:
        throw std::logic_error("pipeline: W instructions are refused in the constructor");
    }
  }
  for (auto& v : grad_sends)
    for (dist::Comm::SendHandle& h : v) h.wait();
  for (auto& v : act_sends)
    for (dist::Comm::SendHandle& h : v) h.wait();
}

std::int64_t PipelineStage::evaluate(const std::int32_t* tokens, const std::int32_t* targets, kernels::Buf loss_sum) {
  std::int64_t counted = 0;
  for (auto& chunk : chunks_) {
    const std::size_t bytes = chunk->boundary_bytes();
    if (!chunk->first_stage()) comm_.recv(*pp_group_, chunk->input(0).ptr, bytes, prev_rank(), kActivations);
    counted += chunk->evaluate(0, tokens, targets, loss_sum);
    if (!chunk->last_stage()) comm_.send(*pp_group_, chunk->output(0).ptr, bytes, next_rank(), kActivations);
  }
  return counted;
}

}  // namespace ptrain::train
