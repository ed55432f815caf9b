#include "engine/train/pipeline_stage.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace ptrain::train {
namespace {

constexpr int kActivations = 0, kGradients = 1;  // channels (pipeline/schedule.h)

std::size_t index(int i) { return static_cast<std::size_t>(i); }

// The executor receives into and sends from buffers that live only between a message and its
// compute op: every RecvAct must come right before its F, SendAct right after it, RecvGrad right
// before its B and SendGrad right after it (what pipeline::build produces).
void check_messages_beside_compute(const std::vector<pipeline::Instr>& list) {
  using pipeline::Op;
  auto is = [&](std::size_t i, Op op, const pipeline::Instr& like) {
    return i < list.size() && list[i].op == op && list[i].microbatch == like.microbatch &&
           list[i].chunk == like.chunk;
  };
  for (std::size_t i = 0; i < list.size(); ++i) {
    const pipeline::Instr& in = list[i];
    const bool ok = (in.op == Op::RecvAct && is(i + 1, Op::Forward, in)) ||
                    (in.op == Op::SendAct && i > 0 && is(i - 1, Op::Forward, in)) ||
                    (in.op == Op::RecvGrad && is(i + 1, Op::Backward, in)) ||
                    (in.op == Op::SendGrad && i > 0 && is(i - 1, Op::Backward, in)) ||
                    pipeline::is_compute(in.op);
    if (!ok)
      throw std::logic_error("pipeline executor: " + pipeline::to_string(in) +
                             " is not beside its compute op");
  }
}

// The op after which a microbatch's gradients are all written.
pipeline::Op gradients_done(const pipeline::Schedule& s) {
  return s.split_weight_grad ? pipeline::Op::WeightGrad : pipeline::Op::Backward;
}

// ZeRO stages 0 and 1 reduce a unit once the last microbatch's gradients are written: in every
// chunk that must be the last microbatch to finish.
void check_backward_order(const pipeline::Schedule& s, const std::vector<pipeline::Instr>& list) {
  std::vector<int> last(index(s.vpp), -1);
  for (const pipeline::Instr& in : list)
    if (in.op == gradients_done(s)) last[index(in.chunk)] = in.microbatch;
  for (int mb : last)
    if (mb != s.microbatches - 1)
      throw std::logic_error("pipeline executor: a chunk's last gradients are not the last microbatch's");
}

}  // namespace

PipelineStage::PipelineStage(const config::JobSpec& spec, model::ParamStore& params, const kernels::Ops& ops,
                             dist::Comm& comm, const dist::Group* pp_group, parallel::TensorParallel* tp,
                             parallel::ContextParallel* cp, parallel::ExpertParallel* ep, int microbatches)
    : comm_(comm),
      pp_group_(pp_group),
      pp_rank_(pp_group != nullptr ? pp_group->index : 0),
      pp_(spec.parallel.pp),
      ops_(ops),
      staged_(ops.device() != kernels::Device::Cpu && !comm.takes_device_memory()),
      schedule_(
          pipeline::build(spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages, microbatches)) {
  if (schedule_.split_weight_grad && spec.parallel.zero >= 2)  // config::load refuses it (rules_schedule.cpp)
    throw std::logic_error("PipelineStage: ZeRO 2/3 would reduce before W");
  if ((pp_group == nullptr ? 1 : pp_group->size()) != pp_)
    throw std::logic_error("PipelineStage: the pp group does not have parallel.pp ranks");
  if (pp_ > 1 && !comm.sends_in_flight())
    throw std::invalid_argument(std::string("parallel.pp: the ") + comm.backend() +
                                " transport cannot leave sends in flight, which pipeline schedules need");
  const std::vector<pipeline::Instr>& list = schedule_.ranks[index(pp_rank_)];
  check_messages_beside_compute(list);
  check_backward_order(schedule_, list);
  buffers_ = std::move(pipeline::rank_buffers(schedule_)[index(pp_rank_)]);
  for (int c = 0; c < schedule_.vpp; ++c) {
    const int slots = buffers_.activation_slots[index(c)];
    chunks_.push_back(std::make_unique<model::Transformer>(
        spec, params, ops,
        model::ChunkOptions{c, slots, c > 0 ? chunks_.front().get() : nullptr, schedule_.split_weight_grad,
                            tp, cp, ep}));
    slot_of_.emplace_back(index(microbatches), -1);
    free_slots_.emplace_back();
    for (int s = slots - 1; s >= 0; --s) free_slots_.back().push_back(s);
  }
  const model::Transformer& first = *chunks_.front();
  send_buffers_ =
      runtime::Buffer(ops, first.boundary_elements() * buffers_.send_buffers, first.activation_dtype());
  if (staged_ && pp_ > 1) {  // evaluate() sends from mirror 0 too
    host_sends_.resize(first.boundary_bytes() * index(std::max(buffers_.send_buffers, 1)));
    host_receive_.resize(first.boundary_bytes());
  }
  if (pp_ > 1) {
    std::vector<dist::Comm::Channel> open;
    for (const pipeline::Channel& c : pipeline::channels(schedule_))
      open.push_back({c.from, c.to, c.activations ? kActivations : kGradients});
    comm.open_channels(*pp_group, open, first.boundary_bytes());
  }
  const std::size_t tokens = static_cast<std::size_t>(spec.train.micro_batch) * static_cast<std::size_t>(spec.model.seq_len);
  tokens_.resize(tokens);
  targets_.resize(tokens);
}

PipelineStage::~PipelineStage() {
  while (!chunks_.empty()) chunks_.pop_back();  // chunk 0 owns the workspace the others use
}

void PipelineStage::set_hooks(model::UnitHooks* hooks) {
  for (auto& chunk : chunks_) chunk->set_hooks(hooks);
}

std::int64_t PipelineStage::activation_bytes() const {
  std::int64_t bytes = static_cast<std::int64_t>(send_buffers_.bytes());
  for (const auto& chunk : chunks_) bytes += chunk->activation_bytes();
  return bytes;
}

int PipelineStage::prev_rank() const { return (pp_rank_ + pp_ - 1) % pp_; }
int PipelineStage::next_rank() const { return (pp_rank_ + 1) % pp_; }

const void* PipelineStage::outgoing(kernels::Buf buffer, int index_of_buffer) {
  if (!staged_) return buffer.ptr;
  const std::size_t bytes = chunks_.front()->boundary_bytes();
  std::byte* mirror = host_sends_.data() + bytes * index(index_of_buffer);
  ops_.copy_to_host(mirror, buffer, bytes);
  return mirror;
}

void PipelineStage::receive(kernels::Buf into, std::size_t bytes, int peer, int channel) {
  if (!staged_) return comm_.recv(*pp_group_, into.ptr, bytes, peer, channel);
  comm_.recv(*pp_group_, host_receive_.data(), bytes, peer, channel);
  ops_.copy_to_device(into, host_receive_.data(), bytes);
}

double PipelineStage::train(const MicrobatchLoader& load, float grad_scale,
                            const runtime::DeviceScalars& loss_sums, optim::ZeroOptimizer& zero) {
  using pipeline::Op;
  double waited = 0;
  auto timed = [&](auto&& wait) {
    const auto t0 = std::chrono::steady_clock::now();
    wait();
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  struct InFlight {
    int released_after;  // list index (pipeline::RankBuffers)
    int buffer;
    dist::Comm::SendHandle handle;
  };
  std::vector<InFlight> in_flight;
  std::vector<int> free_buffers;
  for (int b = buffers_.send_buffers - 1; b >= 0; --b) free_buffers.push_back(b);
  const std::int64_t elements = chunks_.front()->boundary_elements();
  const std::size_t bytes = chunks_.front()->boundary_bytes();
  auto send = [&](int i, kernels::Buf what, int peer, int channel) {
    if (free_buffers.empty())
      throw std::logic_error("pipeline executor: no free send buffer (rank_buffers is wrong)");
    const int b = free_buffers.back();
    free_buffers.pop_back();
    const kernels::Buf buffer = send_buffers_.at(elements * b);
    ops_.convert(buffer, what, elements);
    in_flight.push_back({buffers_.send_released_after[index(i)], b,
                         comm_.isend(*pp_group_, outgoing(buffer, b), bytes, peer, channel)});
  };
  auto release_until = [&](int i) {  // frees the sends known to be over before instruction i
    std::size_t kept = 0;
    for (InFlight& f : in_flight) {
      if (f.released_after < i) {
        timed([&] { f.handle.wait(); });
        free_buffers.push_back(f.buffer);
      } else {
        in_flight[kept++] = std::move(f);
      }
    }
    in_flight.resize(kept);
  };

  const std::vector<pipeline::Instr>& list = schedule_.ranks[index(pp_rank_)];
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    release_until(i);
    const pipeline::Instr& in = list[index(i)];
    model::Transformer& chunk = *chunks_[index(in.chunk)];
    int& slot = slot_of_[index(in.chunk)][index(in.microbatch)];
    if (in.op == Op::RecvAct || (in.op == Op::Forward && chunk.first_stage())) {
      std::vector<int>& free = free_slots_[index(in.chunk)];
      if (free.empty())
        throw std::logic_error("pipeline executor: no free activation slot (rank_buffers is wrong)");
      slot = free.back();
      free.pop_back();
    }
    switch (in.op) {
      case Op::RecvAct:
        timed([&] { receive(chunk.input(slot), bytes, in.peer, kActivations); });
        break;
      case Op::Forward:
        if (chunk.first_stage() || chunk.last_stage()) load(in.microbatch, tokens_.data(), targets_.data());
        chunk.forward(slot, tokens_.data(), targets_.data(), grad_scale,
                      chunk.last_stage() ? loss_sums.at(in.microbatch) : kernels::Buf{});
        break;
      case Op::SendAct:
        send(i, chunk.output(slot), in.peer, kActivations);
        break;
      case Op::RecvGrad:
        timed([&] { receive(chunk.output_grad(), bytes, in.peer, kGradients); });
        break;
      case Op::Backward:
      case Op::WeightGrad:
        zero.begin_microbatch(in.microbatch);
        if (in.op == Op::Backward)
          chunk.backward(slot);
        else
          chunk.weight_grad(slot);
        if (in.op == gradients_done(schedule_)) {
          free_slots_[index(in.chunk)].push_back(slot);
          slot = -1;
        }
        break;
      case Op::SendGrad:
        send(i, chunk.input_grad(), in.peer, kGradients);
        break;
    }
  }
  release_until(static_cast<int>(list.size()) + 1);
  return waited;
}

std::int64_t PipelineStage::evaluate(const std::int32_t* tokens, const std::int32_t* targets, kernels::Buf loss_sum) {
  std::int64_t counted = 0;
  for (auto& chunk : chunks_) {
    const std::size_t bytes = chunk->boundary_bytes();
    if (!chunk->first_stage()) receive(chunk->input(0), bytes, prev_rank(), kActivations);
    counted += chunk->evaluate(0, tokens, targets, loss_sum);
    if (!chunk->last_stage())
      comm_.send(*pp_group_, outgoing(chunk->output(0), 0), bytes, next_rank(), kActivations);
  }
  return counted;
}

}  // namespace ptrain::train
