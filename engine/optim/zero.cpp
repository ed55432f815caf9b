#include "engine/optim/zero.h"

#include <cmath>
#include <stdexcept>

#include "engine/optim/adamw.h"

namespace ptrain::optim {
namespace {

constexpr std::int64_t kVectorElements = 16;  // every chunk starts 64-byte aligned

kernels::Buf f32(float* p) { return {p, kernels::DType::F32}; }

}  // namespace

model::StoreOptions zero_store_options(int stage, int ranks, const kernels::Ops& ops) {
  model::StoreOptions o;
  o.memory = &ops;
  o.unit_multiple = kVectorElements * ranks;
  o.own_params = stage < 3;
  o.own_grads = stage < 2;
  return o;
}

ZeroOptimizer::ZeroOptimizer(const config::JobSpec& spec, model::ParamStore& store, const kernels::Ops& ops,
                             dist::Comm& comm, const dist::Group& group)
    : spec_(spec),
      store_(store),
      ops_(ops),
      comm_(comm),
      group_(group),
      stage_(spec.parallel.zero),
      ranks_(group.size()),
      index_(group.index) {
  if (!group.has_me()) throw std::logic_error("ZeroOptimizer: this rank is not in its data-parallel group");
  const auto& units = store.units();
  for (const model::FlatRange& u : units) {
    if (u.size() % (kVectorElements * ranks_) != 0)
      throw std::logic_error("ZeroOptimizer: the ParamStore was not built with zero_store_options");
    shard_offsets_.push_back(shard_numel_);
    shard_numel_ += u.size() / ranks_;
  }
  for (const model::ParamSlot& s : store.slots()) tied_ = tied_ || s.local.info->tied_head;
  const std::int64_t moments = stage_ == 0 ? store.numel() : shard_numel_;
  exp_avg_ = runtime::Buffer(ops, moments, kernels::DType::F32);
  exp_avg_sq_ = runtime::Buffer(ops, moments, kernels::DType::F32);
  if (stage_ >= 2) {
    shard_grads_ = runtime::Buffer(ops, shard_numel_, kernels::DType::F32);
    for (auto& w : grad_windows_) w = runtime::Buffer(ops, store.largest_unit(), kernels::DType::F32);
    grads_open_.assign(units.size(), false);
  }
  if (stage_ == 3) {
    shard_params_ = runtime::Buffer(ops, shard_numel_, kernels::DType::F32);
    for (auto& w : param_windows_) w = runtime::Buffer(ops, store.largest_unit(), kernels::DType::F32);
  }
}

ZeroBytes ZeroOptimizer::allocated_bytes() const {
  ZeroBytes b;
  b.params = static_cast<double>(stage_ == 3 ? shard_params_.bytes() : static_cast<std::size_t>(store_.numel()) * 4);
  b.grads = static_cast<double>(stage_ >= 2 ? shard_grads_.bytes() : static_cast<std::size_t>(store_.numel()) * 4);
  b.optimizer = static_cast<double>(exp_avg_.bytes() + exp_avg_sq_.bytes());
  for (int w = 0; w < 2; ++w)
    b.windows += static_cast<double>(param_windows_[w].bytes() + grad_windows_[w].bytes());
  return b;
}

std::int64_t ZeroOptimizer::chunk_size(int unit) const {
  return store_.units()[static_cast<size_t>(unit)].size() / ranks_;
}

model::FlatRange ZeroOptimizer::chunk(int unit) const {
  const std::int64_t n = chunk_size(unit), begin = store_.units()[static_cast<size_t>(unit)].begin + index_ * n;
  return {begin, begin + n};
}

int ZeroOptimizer::window_of(int unit) const {
  if (tied_) return unit == store_.embedding_unit() ? 0 : 1;
  return unit % 2;
}

float* ZeroOptimizer::owned_params(int unit) const {
  if (stage_ == 3) return static_cast<float*>(shard_params_.data()) + shard_offset(unit);
  return store_.params() + chunk(unit).begin;
}

float* ZeroOptimizer::owned_grads(int unit) const {
  if (stage_ >= 2) return static_cast<float*>(shard_grads_.data()) + shard_offset(unit);
  return store_.grads() + chunk(unit).begin;
}

float* ZeroOptimizer::owned_moment(const runtime::Buffer& m, int unit) const {
  return static_cast<float*>(m.data()) + (stage_ == 0 ? chunk(unit).begin : shard_offset(unit));
}

void ZeroOptimizer::initialize(std::uint64_t seed, int layers) {
  if (stage_ < 3) return store_.initialize(seed, layers);
  std::vector<float> host;
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u) {
    host.resize(static_cast<std::size_t>(chunk_size(u)));
    store_.initialize_range(seed, layers, chunk(u), host.data());
    ops_.copy_to_device(f32(owned_params(u)), host.data(), host.size() * sizeof(float));
  }
}

void ZeroOptimizer::begin_step(int microbatches) {
  microbatches_ = microbatches;
  microbatch_ = 0;
  if (stage_ < 2) return store_.zero_grads();
  ops_.fill(f32(static_cast<float*>(shard_grads_.data())), 0.0f, shard_numel_);
}

template <typename Collective>
void ZeroOptimizer::on_host(float* data, std::int64_t count, Collective&& collective) {
  if (ops_.device() == kernels::Device::Cpu) return collective(data);
  // Gloo with host staging (ranks that share a GPU cannot share an NCCL communicator).
  staging_.resize(static_cast<std::size_t>(count));
  const std::size_t bytes = staging_.size() * sizeof(float);
  ops_.copy_to_host(staging_.data(), f32(data), bytes);
  collective(staging_.data());
  ops_.copy_to_device(f32(data), staging_.data(), bytes);
}

void ZeroOptimizer::gather_params(int unit) {
  const int w = window_of(unit);
  if (resident_[w] == unit) return;
  if (resident_[w] >= 0) store_.bind_params(resident_[w], nullptr);
  float* window = static_cast<float*>(param_windows_[w].data());
  const std::int64_t n = chunk_size(unit);
  ops_.copy(f32(window + index_ * n), f32(owned_params(unit)), static_cast<std::size_t>(n) * sizeof(float));
  on_host(window, n * ranks_, [&](float* data) { comm_.all_gather(group_, data, static_cast<std::size_t>(n)); });
  store_.bind_params(unit, window);
  resident_[w] = unit;
}

void ZeroOptimizer::gather_all_params() {
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
    on_host(store_.params() + store_.units()[static_cast<size_t>(u)].begin, chunk_size(u) * ranks_,
            [&](float* data) { comm_.all_gather(group_, data, static_cast<std::size_t>(chunk_size(u))); });
}

void ZeroOptimizer::before_forward(int unit) {
  if (stage_ == 3) gather_params(unit);
}

void ZeroOptimizer::before_backward(int unit) {
  if (stage_ == 3) gather_params(unit);
  if (stage_ < 2 || grads_open_[static_cast<size_t>(unit)]) return;
  float* window = static_cast<float*>(grad_windows_[window_of(unit)].data());
  ops_.fill(f32(window), 0.0f, store_.units()[static_cast<size_t>(unit)].size());
  store_.bind_grads(unit, window);
  grads_open_[static_cast<size_t>(unit)] = true;
}

void ZeroOptimizer::after_backward(int unit) {
  const model::FlatRange& u = store_.units()[static_cast<size_t>(unit)];
  const auto n = static_cast<std::size_t>(chunk_size(unit));
  if (stage_ < 2) {
    if (microbatch_ != microbatches_ - 1) return;  // accumulate in place until the last microbatch
    on_host(store_.grads() + u.begin, u.size(), [&](float* data) {
      if (stage_ == 0) comm_.all_reduce(group_, data, static_cast<std::size_t>(u.size()));
      else comm_.reduce_scatter(group_, data, n);
    });
    return;
  }
  float* window = static_cast<float*>(grad_windows_[window_of(unit)].data());
  on_host(window, static_cast<std::int64_t>(n) * ranks_, [&](float* data) { comm_.reduce_scatter(group_, data, n); });
  ops_.accumulate(f32(owned_grads(unit)), f32(window + static_cast<std::size_t>(index_) * n),
                  static_cast<std::int64_t>(n));
  store_.bind_grads(unit, nullptr);
  grads_open_[static_cast<size_t>(unit)] = false;
}

double ZeroOptimizer::grad_norm() {
  double sum = 0;
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
    sum += ops_.sum_squares(f32(owned_grads(u)), chunk_size(u));
  comm_.all_reduce(group_, &sum, 1);
  return std::sqrt(sum);
}

void ZeroOptimizer::clip(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return;
  const auto factor = static_cast<float>(max_norm / (norm + 1e-6));
  if (stage_ == 0) return ops_.scale(f32(store_.grads()), factor, store_.numel());
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
    ops_.scale(f32(owned_grads(u)), factor, chunk_size(u));
}

void ZeroOptimizer::step(double lr, std::int64_t step) {
  const auto& cfg = spec_.optimizer;
  if (stage_ == 0) {
    float* m = static_cast<float*>(exp_avg_.data());
    float* v = static_cast<float*>(exp_avg_sq_.data());
    adamw_update(cfg, store_.slots(), ops_, {{0, store_.numel()}, store_.params(), store_.grads(), m, v}, lr, step);
    return;
  }
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
    adamw_update(cfg, store_.slots(), ops_,
                 {chunk(u), owned_params(u), owned_grads(u), owned_moment(exp_avg_, u), owned_moment(exp_avg_sq_, u)},
                 lr, step);
  after_restore();  // the parameters changed: make them whole again
}

std::vector<ckpt::FlatShard> ZeroOptimizer::saved_shards() {
  std::vector<ckpt::FlatShard> out;
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
    out.push_back({chunk(u), owned_params(u), owned_moment(exp_avg_, u), owned_moment(exp_avg_sq_, u)});
  return out;
}

std::vector<ckpt::FlatShard> ZeroOptimizer::restored_shards() {
  if (stage_ > 0) return saved_shards();
  return {ckpt::whole_store(store_, static_cast<float*>(exp_avg_.data()), static_cast<float*>(exp_avg_sq_.data()))};
}

void ZeroOptimizer::after_restore() {
  if (stage_ == 1 || stage_ == 2) return gather_all_params();
  if (stage_ == 3) {
    for (int& unit : resident_) {
      if (unit >= 0) store_.bind_params(unit, nullptr);
      unit = -1;
    }
  }
}

}  // namespace ptrain::optim
