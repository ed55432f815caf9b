#include "engine/zero/data_parallel.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/threads.h"

namespace ptrain::parallel {
namespace {

using kernels::Buf;
using kernels::DType;

Buf f32(float* p) { return {p, DType::F32}; }

DType param_dtype(const config::JobSpec& spec) {
  return config::bf16_working(spec.train.precision) ? DType::BF16 : DType::F32;
}

// The ZeRO 2/3 windows (data_parallel.h): each one's elements, and each unit's window.
struct Windows {
  std::vector<std::int64_t> elements;
  std::vector<int> of_unit;
};
Windows plan_windows(const model::ParamStore& store, bool tied) {
  const int units = static_cast<int>(store.units().size());
  auto size = [&](int u) { return store.units()[static_cast<size_t>(u)].size(); };
  auto own_window = [&](int u) { return tied && u == store.embedding_unit(); };
  std::int64_t dense = 0, experts = 0;
  for (int u = 0; u < units; ++u) {
    if (own_window(u)) continue;
    std::int64_t& biggest = store.expert_unit(u) ? experts : dense;
    biggest = std::max(biggest, size(u));
  }
  Windows w;
  if (tied) w.elements.push_back(size(store.embedding_unit()));
  const int dense_first = static_cast<int>(w.elements.size());
  w.elements.insert(w.elements.end(), {dense, dense});
  const int expert_first = static_cast<int>(w.elements.size());
  if (experts > 0) w.elements.insert(w.elements.end(), {experts, experts});
  int dense_seen = 0, experts_seen = 0;  // the embedding counts among the dense units
  for (int u = 0; u < units; ++u) {
    const int ordinal = store.expert_unit(u) ? experts_seen++ : dense_seen++;
    w.of_unit.push_back(own_window(u) ? 0
                                      : (store.expert_unit(u) ? expert_first : dense_first) + ordinal % 2);
  }
  return w;
}

}  // namespace

model::StoreOptions zero_store_options(const config::JobSpec& spec, int ranks, const kernels::Ops& ops,
                                       int expert_ranks) {
  const int stage = spec.parallel.zero;
  model::StoreOptions o;
  o.memory = &ops;
  o.unit_multiple = model::kFlatAlignment * ranks;
  o.expert_unit_multiple = model::kFlatAlignment * (expert_ranks > 0 ? expert_ranks : ranks);
  o.own_params = stage < 3;
  o.own_grads = stage < 2;
  o.param_dtype = param_dtype(spec);
  return o;
}

DataParallel::DataParallel(const config::JobSpec& spec, model::ParamStore& store, const kernels::Ops& ops,
                             dist::Comm& comm, const dist::Group& group, ModelParallelGroups model_groups)
    : spec_(spec),
      store_(store),
      ops_(ops),
      offload_(spec.parallel.offload == config::Offload::Optimizer),
      master_memory_(offload_ ? kernels::cpu_ops() : ops),
      comm_(comm),
      group_(group),
      stage_(spec.parallel.zero),
      model_groups_(model_groups),
      staged_(ops, comm) {
  if (!group.has_me()) throw std::logic_error("DataParallel: this rank is not in its data-parallel group");
  if (model_groups.embedding != nullptr && stage_ >= 2)  // config::load refuses it (rules_schedule.cpp)
    throw std::logic_error(
        "DataParallel: ZeRO 2/3 would reduce the tied embedding before its copies are summed");
  const auto& units = store.units();
  bool any_reduction = false;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (store.expert_unit(u) && !group_of(u).has_me())  // group_of throws without the group
      throw std::logic_error("DataParallel: this rank is not in its expert-dp group");
    const std::int64_t size = units[static_cast<std::size_t>(u)].size();
    if (size % (model::kFlatAlignment * ranks_of(u)) != 0)
      throw std::logic_error("DataParallel: the ParamStore was not built with zero_store_options (unit " +
                             std::to_string(u) + " of " + std::to_string(size) + " elements over " +
                             std::to_string(ranks_of(u)) + " ranks)");
    shard_offsets_.push_back(shard_numel_);
    shard_numel_ += size / ranks_of(u);
    any_reduction = any_reduction || ranks_of(u) > 1;
  }
  if (store.param_dtype() != param_dtype(spec))
    throw std::logic_error("DataParallel: the ParamStore's parameter dtype does not follow train.precision");
  for (const model::ParamSlot& s : store.slots()) tied_ = tied_ || s.local.info->tied_head;
  const bool mixed = store.param_dtype() != DType::F32;
  const std::int64_t owned = stage_ == 0 ? store.numel() : shard_numel_;
  if (mixed || stage_ == 3 || offload_) master_ = runtime::OwnedBuffer(master_memory_, owned, DType::F32);
  adamw_ = optim::AdamW(spec.optimizer, master_memory_, owned);
  if (offload_) {
    host_grads_ = runtime::OwnedBuffer(master_memory_, owned, DType::F32);
    if (mixed) host_params_ = runtime::OwnedBuffer(master_memory_, owned, store.param_dtype());
    if (stage_ == 3) device_shard_ = runtime::OwnedBuffer(ops, owned, store.param_dtype());
    // What crosses: the gradients out, the weights back (the bf16 copy, or the fp32 master itself).
    for (runtime::OwnedBuffer* b : {&host_grads_, mixed ? &host_params_ : &master_})
      pins_.emplace_back(ops, b->data(), b->bytes());
    crossing_.assign(units.size(), Crossing::Landed);
    uploads_.assign(units.size(), 0);
  }
  const Windows windows = plan_windows(store, tied_);
  window_of_ = windows.of_unit;
  if (stage_ >= 2) {
    shard_grads_ = runtime::OwnedBuffer(ops, shard_numel_, DType::F32);
    for (std::int64_t n : windows.elements) grad_windows_.emplace_back(ops, n, DType::F32);
    grads_open_.assign(units.size(), false);
  }
  if (stage_ == 3) {
    for (std::int64_t n : windows.elements) param_windows_.emplace_back(ops, n, store.param_dtype());
    resident_.assign(param_windows_.size(), -1);
    window_gathers_.assign(param_windows_.size(), 0);
  }
  unit_gathers_.assign(units.size(), 0);
  if (spec.train.grad_reduce == config::Precision::Bf16 && any_reduction)
    reduce_staging_ = runtime::OwnedBuffer(ops, store.largest_unit(), DType::BF16);
}

ZeroBytes DataParallel::allocated_bytes() const {
  ZeroBytes b;
  const auto full = [&](DType t) { return static_cast<double>(store_.numel()) * static_cast<double>(kernels::dtype_size(t)); };
  const bool master_is_params = stage_ == 3 && store_.param_dtype() == DType::F32;
  b.params = stage_ < 3                ? full(store_.param_dtype())
             : offload_              ? static_cast<double>(device_shard_.bytes())
             : master_is_params      ? static_cast<double>(master_.bytes())
                                     : 0.0;
  b.grads = static_cast<double>(stage_ >= 2 ? shard_grads_.bytes() : static_cast<std::size_t>(full(DType::F32)));
  b.optimizer = static_cast<double>(adamw_.bytes() + (master_is_params && !offload_ ? 0 : master_.bytes()));
  if (offload_) {
    b.host = b.optimizer + static_cast<double>(host_grads_.bytes() + host_params_.bytes());
    b.optimizer = 0;
  }
  for (const runtime::OwnedBuffer& w : param_windows_) b.windows += static_cast<double>(w.bytes());
  for (const runtime::OwnedBuffer& w : grad_windows_) b.windows += static_cast<double>(w.bytes());
  b.windows += static_cast<double>(reduce_staging_.bytes());
  return b;
}

const dist::Group& DataParallel::group_of(int unit) const {
  if (!store_.expert_unit(unit)) return group_;
  if (model_groups_.experts == nullptr)
    throw std::logic_error("DataParallel: the experts' units need this rank's expert-dp group");
  return *model_groups_.experts;
}

std::int64_t DataParallel::chunk_size(int unit) const {
  return unit_size(unit) / ranks_of(unit);
}

model::FlatRange DataParallel::chunk(int unit) const {
  const std::int64_t n = chunk_size(unit),
                     begin = store_.units()[static_cast<size_t>(unit)].begin + index_of(unit) * n;
  return {begin, begin + n};
}

int DataParallel::window_of(int unit) const {
  return window_of_[static_cast<std::size_t>(unit)];
}

float* DataParallel::master_params() const {
  return separate_master() ? static_cast<float*>(master_.data()) : store_.params();
}

model::FlatRange DataParallel::master_range(int unit) const {
  return stage_ == 0 ? store_.units()[static_cast<size_t>(unit)] : chunk(unit);
}

float* DataParallel::owned_params(int unit) const {
  // The master holds the whole flat layout (stage 0, or stages 1-2 in fp32 where it is the model's
  // parameters) or only the owned chunks, packed.
  const bool packed = separate_master() && stage_ > 0;
  return master_params() + (packed ? shard_offset(unit) : chunk(unit).begin);
}

float* DataParallel::owned_grads(int unit) const {
  if (stage_ >= 2) return static_cast<float*>(shard_grads_.data()) + shard_offset(unit);
  return store_.grads() + chunk(unit).begin;
}

std::int64_t DataParallel::master_offset(int unit) const {
  return stage_ == 0 ? store_.units()[static_cast<size_t>(unit)].begin : shard_offset(unit);
}

std::int64_t DataParallel::moment_offset(int unit) const {
  return stage_ == 0 ? chunk(unit).begin : shard_offset(unit);
}

std::vector<optim::DecaySpan> DataParallel::decay_spans(model::FlatRange range) const {
  std::vector<optim::DecaySpan> spans;
  for (const model::ParamSlot& s : store_.slots()) {
    const std::int64_t lo = std::max(range.begin, s.offset), hi = std::min(range.end, s.offset + s.numel);
    if (lo < hi) spans.push_back({lo - range.begin, hi - range.begin, s.local.info->weight_decay});
  }
  return spans;
}

void DataParallel::initialize(std::uint64_t seed, int layers) {
  await_gathers();
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u) {  // drawn where they live
    const model::FlatRange range = master_range(u);
    float* dst = stage_ == 0 ? master_params() + range.begin : owned_params(u);
    store_.initialize_range(master_memory_, seed, layers, range, f32(dst));
  }
  publish();
}

void DataParallel::assign_weights(const float* full) {
  await_gathers();
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u) {
    const model::FlatRange range = master_range(u);
    float* dst = stage_ == 0 ? master_params() + range.begin : owned_params(u);
    master_memory_.copy_to_device(f32(dst), full + range.begin,
                                  static_cast<std::size_t>(range.size()) * sizeof(float));
  }
  publish();
}

void DataParallel::begin_step(int microbatches) {
  settle();
  microbatches_ = microbatches;
  microbatch_ = 0;
  backward_ended_ = false;
  if (stage_ < 2) return store_.zero_grads();
  ops_.fill(f32(static_cast<float*>(shard_grads_.data())), 0.0f, shard_numel_);
}

void DataParallel::sum_sequence_parallel_grads(float* grads, int unit) {
  if (model_groups_.tensor == nullptr || !spec_.parallel.sequence_parallel) return;
  const std::int64_t begin = store_.units()[static_cast<size_t>(unit)].begin;
  for (const model::ParamSlot& slot : store_.slots()) {
    if (slot.unit != unit || !slot.local.info->sequence_parallel_grad) continue;
    const auto n = static_cast<std::size_t>(slot.numel);
    staged_.run(*model_groups_.tensor, grads + (slot.offset - begin), n * sizeof(float),
                [&](void* p) { comm_.all_reduce(*model_groups_.tensor, static_cast<float*>(p), n); });
  }
}

void DataParallel::reduce(float* grads, int unit) {
  sum_sequence_parallel_grads(grads, unit);
  const std::int64_t size = unit_size(unit);
  Buf data = f32(grads);
  if (reduce_staging_.size() > 0) {
    data = reduce_staging_.at();
    settle(data.ptr);
    ops_.convert(data, f32(grads), size);
  }
  const dist::ElemType type = parallel::comm_type(data.dtype);
  dist::Comm::Ticket ticket = 0;
  const dist::Group& group = group_of(unit);
  staged_.run(
      group, data.ptr, static_cast<std::size_t>(size) * kernels::dtype_size(data.dtype), [&](void* p) {
        if (stage_ == 0)
          comm_.all_reduce(group, p, static_cast<std::size_t>(size), type, dist::ReduceOp::Sum, &ticket);
        else
          comm_.reduce_scatter(group, p, static_cast<std::size_t>(chunk_size(unit)), type, &ticket);
      });
  pending_.push_back({ticket, unit, data, grads});
}

void DataParallel::finish(const PendingReduction& p) {
  comm_.join(p.ticket);
  const std::int64_t n = chunk_size(p.unit), mine = index_of(p.unit) * n;
  if (stage_ >= 2) return ops_.accumulate(f32(owned_grads(p.unit)), runtime::advance(p.reduced, mine), n);
  if (p.reduced.ptr == p.grads) return;  // reduced in place
  // Reduced in bf16: back into the fp32 gradients, all of them (stage 0) or the owned chunk.
  if (stage_ == 0)
    ops_.convert(f32(p.grads), p.reduced, unit_size(p.unit));
  else
    ops_.convert(f32(p.grads + mine), runtime::advance(p.reduced, mine), n);
}

void DataParallel::settle(const void* buffer) {
  std::size_t kept = 0;
  for (const PendingReduction& p : pending_) {
    if (buffer == nullptr || p.reduced.ptr == buffer)
      finish(p);
    else
      pending_[kept++] = p;
  }
  pending_.resize(kept);
}

void DataParallel::join_gather(dist::Comm::Ticket& ticket) {
  comm_.join(ticket);
  ticket = 0;
}

void DataParallel::await_gathers() {
  host_update_.wait_all();
  for (dist::Comm::Ticket& t : unit_gathers_) join_gather(t);
  for (dist::Comm::Ticket& t : window_gathers_) join_gather(t);
}

void DataParallel::gather_params(int unit, bool wait) {
  const auto w = static_cast<std::size_t>(window_of(unit));
  if (resident_[w] != unit) {
    // The window's previous gather may still be in flight (a prefetch its unit never used).
    join_gather(window_gathers_[w]);
    if (resident_[w] >= 0) store_.bind_params(resident_[w], nullptr);
    const Buf window = param_windows_[w].at();
    const std::int64_t n = chunk_size(unit);
    const dist::Group& group = group_of(unit);
    const Buf mine = runtime::advance(window, index_of(unit) * n);
    if (offload_) {  // the owned chunk's device copy, once this step's update has reached it
      land_unit(unit);
      ops_.copy(mine, runtime::advance(device_shard_.at(), shard_offset(unit)),
                static_cast<std::size_t>(n) * kernels::dtype_size(window.dtype));
    } else {
      ops_.convert(mine, f32(owned_params(unit)), n);
    }
    staged_.run(group, window.ptr,
                static_cast<std::size_t>(n * ranks_of(unit)) * kernels::dtype_size(window.dtype),
                [&](void* p) {
                  comm_.all_gather(group, p, static_cast<std::size_t>(n), parallel::comm_type(window.dtype),
                                   &window_gathers_[w]);
                });
    store_.bind_params(unit, window.ptr);
    resident_[w] = unit;
  }
  if (wait) join_gather(window_gathers_[w]);
}

void DataParallel::release_windows() {
  for (int& unit : resident_) {
    if (unit >= 0) store_.bind_params(unit, nullptr);
    unit = -1;
  }
}

void DataParallel::publish() {
  if (writes_working_copy()) {
    const Buf params = store_.param_buffer();
    if (stage_ == 0) {
      ops_.convert(params, f32(master_params()), store_.numel());
    } else {
      for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
        ops_.convert(runtime::advance(params, chunk(u).begin), f32(owned_params(u)), chunk_size(u));
    }
  }
  publish_converted();
}

void DataParallel::publish_converted() {
  release_windows();  // stage 3: the windows are stale, gathered again at their next use
  const int units = static_cast<int>(store_.units().size());
  if (offload_) {  // each unit crosses to the device as the next forward nears it (land_unit)
    for (int u = 0; u < units; ++u) stage_on_host(u);
    crossing_.assign(static_cast<std::size_t>(units), Crossing::OnHost);
    return;
  }
  if (stage_ == 0 || stage_ == 3) return;
  for (int u = 0; u < units; ++u) gather_unit(u);  // joined as the next forward reaches them (before_forward)
}

void DataParallel::gather_unit(int unit) {
  const model::FlatRange& range = store_.units()[static_cast<size_t>(unit)];
  const Buf whole = runtime::advance(store_.param_buffer(), range.begin);
  const dist::Group& group = group_of(unit);
  staged_.run(group, whole.ptr, static_cast<std::size_t>(range.size()) * kernels::dtype_size(whole.dtype),
              [&](void* p) {
                comm_.all_gather(group, p, static_cast<std::size_t>(chunk_size(unit)),
                                 parallel::comm_type(whole.dtype), &unit_gathers_[static_cast<size_t>(unit)]);
              });
}

void DataParallel::stage_on_host(int unit) {
  if (host_params_.size() == 0) return;  // fp32: the master itself crosses
  const std::int64_t at = master_offset(unit);
  master_memory_.convert(runtime::advance(host_params_.at(), at), f32(master_params() + at), master_range(unit).size());
}

void DataParallel::publish_update() {
  for (int u = 0; offload_ && u < static_cast<int>(store_.units().size()); ++u) land_unit(u);
}

void DataParallel::upload_unit(int unit) {
  if (!offload_ || crossing_[static_cast<size_t>(unit)] != Crossing::OnHost) return;
  host_update_.wait(unit);
  const std::int64_t at = master_offset(unit);
  const model::FlatRange range = master_range(unit);
  const void* from = host_params_.size() > 0 ? runtime::advance(host_params_.at(), at).ptr : master_params() + at;
  const Buf to = stage_ == 3 ? runtime::advance(device_shard_.at(), at)
                             : runtime::advance(store_.param_buffer(), range.begin);
  const std::size_t bytes = static_cast<std::size_t>(range.size()) * kernels::dtype_size(to.dtype);
  kernels::Ops::MarkerSpan span;
  const bool traced = trace_ != nullptr && trace_->has_device();
  uploads_[static_cast<size_t>(unit)] = ops_.upload_async(to, from, bytes, traced ? &span : nullptr);
  if (traced)
    trace_->add_device("upload unit " + std::to_string(unit), "offload", span.from, span.to,
                       "\"bytes\": " + std::to_string(bytes), dist::Trace::kCopyStream);
  crossing_[static_cast<size_t>(unit)] = Crossing::Uploading;
}

void DataParallel::land_unit(int unit) {
  upload_unit(unit);
  if (!offload_ || crossing_[static_cast<size_t>(unit)] != Crossing::Uploading) return;
  ops_.await_upload(uploads_[static_cast<size_t>(unit)]);
  crossing_[static_cast<size_t>(unit)] = Crossing::Landed;
  if (stage_ == 1 || stage_ == 2) gather_unit(unit);
}

void DataParallel::cross_ahead(int unit) {
  const int units = static_cast<int>(store_.units().size());
  if (!offload_ || unit + 1 >= units) return;
  // The next unit's gather (stages 1-2) while this one computes, if its upload has been started;
  // the uploads of the two after it beside the compute, where their updates are done.
  if ((stage_ == 1 || stage_ == 2) && crossing_[static_cast<size_t>(unit + 1)] == Crossing::Uploading)
    land_unit(unit + 1);
  for (int next = unit + 1; next <= unit + 2 && next < units; ++next)
    if (host_update_.done(next)) upload_unit(next);
}

void DataParallel::before_forward(int unit) {
  if (stage_ < 3) {
    land_unit(unit);
    cross_ahead(unit);
    return join_gather(unit_gathers_[static_cast<size_t>(unit)]);
  }
  gather_params(unit, true);
  cross_ahead(unit);
  // The next unit in forward order, while this one computes. Not after the embedding: at the start
  // of a forward its lookup is too short to hide a gather (the first layer gathers on its own
  // announcement), and a tied head announces it again at the end, where nothing follows.
  if (unit != store_.embedding_unit() && unit + 1 < static_cast<int>(store_.units().size()))
    gather_params(unit + 1, false);
}

void DataParallel::before_backward(int unit) {
  if (stage_ < 3) {
    land_unit(unit);
    join_gather(unit_gathers_[static_cast<size_t>(unit)]);
  } else {
    gather_params(unit, true);
    if (unit > 0) gather_params(unit - 1, false);  // the next unit in backward order
  }
  if (stage_ < 2 || grads_open_[static_cast<size_t>(unit)]) return;
  float* window = static_cast<float*>(grad_windows_[static_cast<std::size_t>(window_of(unit))].data());
  settle(window);
  ops_.fill(f32(window), 0.0f, unit_size(unit));
  store_.bind_grads(unit, window);
  grads_open_[static_cast<size_t>(unit)] = true;
}

void DataParallel::after_backward(int unit) {
  if (stage_ < 2) {
    if (microbatch_ != microbatches_ - 1) return;  // accumulate in place until the last microbatch
    if (model_groups_.embedding != nullptr && unit == store_.embedding_unit())
      return;  // finish_reductions reduces it
    return reduce(store_.grads() + store_.units()[static_cast<size_t>(unit)].begin, unit);
  }
  reduce(static_cast<float*>(grad_windows_[static_cast<std::size_t>(window_of(unit))].data()), unit);
  store_.bind_grads(unit, nullptr);
  grads_open_[static_cast<size_t>(unit)] = false;
}

void DataParallel::finish_reductions() {
  if (!backward_ended_) sum_tied_embedding();
  backward_ended_ = true;
  settle();
}

void DataParallel::sum_tied_embedding() {
  if (model_groups_.embedding == nullptr) return;
  const int unit = store_.embedding_unit();
  for (const model::ParamSlot& slot : store_.slots()) {
    if (!slot.local.info->tied_head) continue;
    float* grads = store_.grads() + slot.offset;
    const auto n = static_cast<std::size_t>(slot.numel);
    staged_.run(*model_groups_.embedding, grads, n * sizeof(float),
                [&](void* p) { comm_.all_reduce(*model_groups_.embedding, static_cast<float*>(p), n); });
  }
  reduce(store_.grads() + store_.units()[static_cast<size_t>(unit)].begin, unit);
}

void DataParallel::step(double lr, std::int64_t step, float grad_scale) {
  finish_reductions();
  await_gathers();  // AdamW writes the owned chunks (the model's own parameters in fp32 at stages 1-2)
  if (offload_) return start_host_update(lr, step, grad_scale);
  const Buf params = store_.param_buffer();
  const bool copy = writes_working_copy();
  if (stage_ == 0) {
    const model::FlatRange all{0, store_.numel()};
    adamw_.update(master_params(), store_.grads(), 0, decay_spans(all), lr, step, grad_scale, copy ? params : Buf{});
  } else {
    for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
      adamw_.update(owned_params(u), owned_grads(u), moment_offset(u), decay_spans(chunk(u)), lr, step, grad_scale,
                    copy ? runtime::advance(params, chunk(u).begin) : Buf{});
  }
  publish_converted();
}

void DataParallel::start_host_update(double lr, std::int64_t step, float grad_scale) {
  const int units = static_cast<int>(store_.units().size());
  // An upload no forward landed (a unit this step never used) must end before its host bytes change.
  for (int u = 0; u < units; ++u)
    if (crossing_[static_cast<size_t>(u)] == Crossing::Uploading) land_unit(u);
  float* host_grads = static_cast<float*>(host_grads_.data());
  for (int u = 0; u < units; ++u) {  // at stage 0 each rank updates all of it
    float* grads = stage_ == 0 ? store_.grads() + master_range(u).begin : owned_grads(u);
    ops_.copy_to_host(host_grads + master_offset(u), f32(grads),
                      static_cast<std::size_t>(master_range(u).size()) * sizeof(float));
  }
  release_windows();
  crossing_.assign(static_cast<std::size_t>(units), Crossing::OnHost);
  host_update_.start(units, [this, host_grads, lr, step, grad_scale, threads = kernels::current_cpu_threads()](int u) {
    if (u == 0) kernels::set_cpu_threads(threads);  // the rank's share of the cores, not all of them
    const std::int64_t at = master_offset(u);
    adamw_.update(master_params() + at, host_grads + at, at, decay_spans(master_range(u)), lr, step, grad_scale, Buf{});
    stage_on_host(u);
  });
}

std::vector<model::FlatShard> DataParallel::saved_shards() {
  await_gathers();
  std::vector<model::FlatShard> out;
  for (int u = 0; u < static_cast<int>(store_.units().size()); ++u)
    out.push_back({chunk(u), owned_params(u), adamw_.exp_avg(moment_offset(u)), adamw_.exp_avg_sq(moment_offset(u))});
  return out;
}

std::vector<model::FlatShard> DataParallel::restored_shards() {
  if (stage_ > 0) return saved_shards();
  return {{{0, store_.numel()}, master_params(), adamw_.exp_avg(0), adamw_.exp_avg_sq(0)}};
}

void DataParallel::after_restore() { publish(); }

}  // namespace ptrain::parallel
