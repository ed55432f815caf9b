#include "engine/train/pipeline_stage.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

namespace ptrain::train {
namespace {

constexpr int kActivations = 0, kGradients = 1;  // channels (pipeline/schedule.h)

std::size_t index(int i) { return static_cast<std::size_t>(i); }

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
      executor_(pipeline::build(spec, microbatches),
                pp_rank_) {
  const pipeline::Schedule& schedule = executor_.schedule();
  const pipeline::RankBuffers& buffers = executor_.buffers();
  if (schedule.split_weight_grad && spec.parallel.zero >= 2)  // config::load refuses it (rules_schedule.cpp)
    throw std::logic_error("PipelineStage: ZeRO 2/3 would reduce before W");
  if ((pp_group == nullptr ? 1 : pp_group->size()) != pp_)
    throw std::logic_error("PipelineStage: the pp group does not have parallel.pp ranks");
  if (pp_ > 1 && !comm.sends_in_flight())
    throw std::invalid_argument(std::string("parallel.pp: the ") + comm.backend() +
                                " transport cannot leave sends in flight, which pipeline schedules need");
  const bool shared = buffers.shared_slots > 0;
  for (int c = 0; c < schedule.vpp; ++c) {
    const int slots = shared ? 0 : buffers.activation_slots[index(c)];
    chunks_.push_back(std::make_unique<model::Transformer>(
        spec, params, ops,
        model::ChunkOptions{c, slots, c > 0 ? chunks_.front().get() : nullptr, schedule.split_weight_grad,
                            tp, cp, ep}));
  }
  if (shared) {
    std::int64_t stride = 0;
    for (const auto& chunk : chunks_) stride = std::max(stride, chunk->slot_bytes());
    stride = (stride + runtime::Arena::kAlignment - 1) / runtime::Arena::kAlignment * runtime::Arena::kAlignment;
    shared_slots_ = runtime::OwnedBuffer(ops, stride / 4 * buffers.shared_slots, kernels::DType::I32);  // 4-byte units
    for (const auto& chunk : chunks_) chunk->place_slots(spec, shared_slots_.at(), stride, buffers.shared_slots);
  }
  const model::Transformer& first = *chunks_.front();
  send_buffers_ =
      runtime::OwnedBuffer(ops, first.boundary_elements() * buffers.send_buffers, first.activation_dtype());
  if (staged_ && pp_ > 1) {  // evaluate() sends from mirror 0 too
    host_sends_.resize(first.boundary_bytes() * index(std::max(buffers.send_buffers, 1)));
    host_receive_.resize(first.boundary_bytes());
  }
  if (pp_ > 1) {
    std::vector<dist::Comm::Channel> open;
    for (const pipeline::Channel& c : pipeline::channels(schedule))
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

void PipelineStage::set_fp8_history(const model::Fp8History* history) {
  for (auto& chunk : chunks_) chunk->set_fp8_history(history);
}

void PipelineStage::weights_changed() {
  for (auto& chunk : chunks_) chunk->weights_changed();
}

std::int64_t PipelineStage::fp8_weight_copy_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& chunk : chunks_) bytes += chunk->fp8_weight_copy_bytes();
  return bytes;
}

std::int64_t PipelineStage::activation_bytes() const {
  std::int64_t bytes = static_cast<std::int64_t>(send_buffers_.bytes() + shared_slots_.bytes());
  for (const auto& chunk : chunks_) bytes += chunk->activation_bytes();
  return bytes;
}

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

// One step's work for the executor: the chunks' compute and the pp group's messages, timing the
// host's waits for messages.
class PipelineStage::Step final : public pipeline::StageWork {
 public:
  Step(PipelineStage& stage, const MicrobatchLoader& load, float grad_scale, const runtime::DeviceScalars& loss_sums,
       parallel::DataParallel& zero)
      : stage_(stage),
        load_(load),
        grad_scale_(grad_scale),
        loss_sums_(loss_sums),
        zero_(zero),
        sends_(index(stage.executor_.buffers().send_buffers)) {}
  double waited() const { return waited_; }

  void receive_activation(int chunk, int slot, int peer) override {
    model::Transformer& c = *stage_.chunks_[index(chunk)];
    timed("wait activation", chunk, peer, [&] { stage_.receive(c.input(slot), c.boundary_bytes(), peer, kActivations); });
  }
  void forward(int chunk, int slot, int microbatch) override {
    model::Transformer& c = *stage_.chunks_[index(chunk)];
    traced(pipeline::Op::Forward, chunk, microbatch, [&] {
      if (c.first_stage() || c.last_stage()) load_(microbatch, stage_.tokens_.data(), stage_.targets_.data());
      c.forward(slot, stage_.tokens_.data(), stage_.targets_.data(), grad_scale_,
                c.last_stage() ? loss_sums_.at(microbatch) : kernels::Buf{});
    });
  }
  void send_activation(int chunk, int slot, int buffer, int peer) override {
    send(stage_.chunks_[index(chunk)]->output(slot), buffer, peer, kActivations);
  }
  void receive_gradient(int chunk, int peer) override {
    model::Transformer& c = *stage_.chunks_[index(chunk)];
    timed("wait gradient", chunk, peer, [&] { stage_.receive(c.output_grad(), c.boundary_bytes(), peer, kGradients); });
  }
  void backward(int chunk, int slot, int microbatch) override {
    zero_.begin_microbatch(microbatch);
    traced(pipeline::Op::Backward, chunk, microbatch, [&] { stage_.chunks_[index(chunk)]->backward(slot); });
  }
  void weight_grad(int chunk, int slot, int microbatch) override {
    zero_.begin_microbatch(microbatch);
    traced(pipeline::Op::WeightGrad, chunk, microbatch, [&] { stage_.chunks_[index(chunk)]->weight_grad(slot); });
  }
  void send_gradient(int chunk, int buffer, int peer) override {
    send(stage_.chunks_[index(chunk)]->input_grad(), buffer, peer, kGradients);
  }
  void pass_activation(int from_chunk, int from_slot, int chunk, int slot) override {
    const model::Transformer& to = *stage_.chunks_[index(chunk)];
    stage_.ops_.convert(to.input(slot), stage_.chunks_[index(from_chunk)]->output(from_slot), to.boundary_elements());
  }
  void pass_gradient(int from_chunk, int chunk) override {
    // Nothing to move: the chunks share one backward workspace, where the later chunk's B left its
    // input grad and the earlier chunk's B, the rank's next backward, starts from it.
    if (stage_.chunks_[index(from_chunk)]->input_grad().ptr != stage_.chunks_[index(chunk)]->output_grad().ptr)
      throw std::logic_error("PipelineStage: the chunks of a rank no longer share the backward workspace");
  }
  void wait_send(int buffer) override {
    timed("wait send", -1, -1, [&] { sends_[index(buffer)].wait(); });
  }

 private:
  // A wait for messages: counted as idle, and a span of the trace ("wait activation c0", peer).
  template <typename Wait>
  void timed(const char* what, int chunk, int peer, Wait&& wait) {
    const auto t0 = std::chrono::steady_clock::now();
    wait();
    const auto t1 = std::chrono::steady_clock::now();
    waited_ += std::chrono::duration<double>(t1 - t0).count();
    if (stage_.trace_ != nullptr)
      stage_.trace_->add(chunk < 0 ? what : std::string(what) + " c" + std::to_string(chunk), "wait",
                         dist::Trace::kSteps, t0, t1, peer < 0 ? std::string() : "\"peer\": " + std::to_string(peer));
  }
  // A compute op, a span of the trace named as `ptrain schedule --trace` names it ("F mb3 c0"): as
  // the host issued it, and on a device with a timeline of its own, as the device ran it.
  template <typename Work>
  void traced(pipeline::Op op, int chunk, int microbatch, Work&& work) {
    dist::Trace* trace = stage_.trace_;
    if (trace == nullptr) return work();
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t from = trace->mark();
    work();
    const std::uint64_t to = trace->mark();
    const std::string name = std::string(pipeline::to_string(op)) + " mb" + std::to_string(microbatch) + " c" +
                             std::to_string(chunk);
    const std::string args = "\"microbatch\": " + std::to_string(microbatch) + ", \"chunk\": " + std::to_string(chunk);
    trace->add(name, pipeline::trace_category(op), dist::Trace::kSteps, t0, std::chrono::steady_clock::now(), args);
    trace->add_device(name, pipeline::trace_category(op), from, to, args);
  }
  // Copies `what` into send buffer `buffer` and leaves its send in flight.
  void send(kernels::Buf what, int buffer, int peer, int channel) {
    const model::Transformer& first = *stage_.chunks_.front();
    const std::int64_t elements = first.boundary_elements();
    const kernels::Buf from = stage_.send_buffers_.at(elements * buffer);
    stage_.ops_.convert(from, what, elements);
    sends_[index(buffer)] = stage_.comm_.isend(*stage_.pp_group_, stage_.outgoing(from, buffer),
                                                      first.boundary_bytes(), peer, channel);
  }

  PipelineStage& stage_;
  const MicrobatchLoader& load_;
  float grad_scale_;
  const runtime::DeviceScalars& loss_sums_;
  parallel::DataParallel& zero_;
  // The send from each send buffer. Local to the step, so that an exception unwinding out of it
  // abandons what is in flight rather than waiting for it (Comm::SendHandle).
  std::vector<dist::Comm::SendHandle> sends_;
  double waited_ = 0;
};

double PipelineStage::train(const MicrobatchLoader& load, float grad_scale,
                            const runtime::DeviceScalars& loss_sums, parallel::DataParallel& zero) {
  Step step(*this, load, grad_scale, loss_sums, zero);
  executor_.run(step);
  return step.waited();
}

std::int64_t PipelineStage::evaluate(const std::int32_t* tokens, const std::int32_t* targets, kernels::Buf loss_sum) {
  const config::StagePlacement place = executor_.schedule().placement();
  std::int64_t counted = 0;
  for (int c = 0; c < static_cast<int>(chunks_.size()); ++c) {
    model::Transformer& chunk = *chunks_[index(c)];
    const std::size_t bytes = chunk.boundary_bytes();
    // A hop within the rank (the V's turn) hands the earlier chunk's output over in memory.
    if (const int earlier = place.chunk_beside(pp_rank_, c, -1); earlier >= 0)
      ops_.convert(chunk.input(0), chunks_[index(earlier)]->output(0), chunk.boundary_elements());
    else if (!chunk.first_stage())
      receive(chunk.input(0), bytes, place.prev_rank(pp_rank_, c), kActivations);
    counted += chunk.evaluate(0, tokens, targets, loss_sum);
    if (!chunk.last_stage() && place.chunk_beside(pp_rank_, c, +1) < 0)
      comm_.send(*pp_group_, outgoing(chunk.output(0), 0), bytes, place.next_rank(pp_rank_, c), kActivations);
  }
  return counted;
}

}  // namespace ptrain::train
