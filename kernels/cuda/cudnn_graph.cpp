// cuDNN graph API layer (see cudnn_graph.h).
#include "kernels/cuda/cudnn_graph.h"

#include <dlfcn.h>

#include <array>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <variant>

namespace ptrain::kernels::cuda::cudnn {

namespace {

// Opens libcudnn.so.9 and resolves Api's entry points; the reason when it cannot.
std::variant<Api, std::string> load_api() {
  std::string tried;
  void* lib = nullptr;
  auto try_open = [&](const char* name) {
    if (lib == nullptr) lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (why != nullptr ? why : name);
    }
  };
#ifdef PTRAIN_CUDNN_LIBRARY_DIR
  try_open(PTRAIN_CUDNN_LIBRARY_DIR "/libcudnn.so.9");
#endif
  try_open("libcudnn.so.9");
  if (lib == nullptr) return "cuDNN is not available: " + tried;
  Api a{};
  std::string missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  resolve(a.GetVersion, "cudnnGetVersion");
  resolve(a.GetErrorString, "cudnnGetErrorString");
  resolve(a.GetLastErrorString, "cudnnGetLastErrorString");
  resolve(a.Create, "cudnnCreate");
  resolve(a.Destroy, "cudnnDestroy");
  resolve(a.SetStream, "cudnnSetStream");
  resolve(a.BackendCreateDescriptor, "cudnnBackendCreateDescriptor");
  resolve(a.BackendDestroyDescriptor, "cudnnBackendDestroyDescriptor");
  resolve(a.BackendSetAttribute, "cudnnBackendSetAttribute");
  resolve(a.BackendGetAttribute, "cudnnBackendGetAttribute");
  resolve(a.BackendFinalize, "cudnnBackendFinalize");
  resolve(a.BackendExecute, "cudnnBackendExecute");
  if (!missing.empty()) return "cuDNN is not available: libcudnn.so.9 lacks " + missing;
  return a;
}

}  // namespace

const Api& api() {
  static const std::variant<Api, std::string> loaded = load_api();  // never unloaded
  if (const std::string* why = std::get_if<std::string>(&loaded)) throw std::runtime_error(*why);
  return std::get<Api>(loaded);
}

void check(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::array<char, 1024> last{};
  api().GetLastErrorString(last.data(), last.size());
  std::string message = std::string("cuDNN ") + what + ": " + api().GetErrorString(status);
  if (last[0] != '\0') message += std::string(" (") + last.data() + ")";
  throw std::runtime_error(message);
}

// ---- Descriptor

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  check(api().BackendCreateDescriptor(type, &d_), "creating a descriptor");
}

Descriptor::~Descriptor() {
  if (d_ != nullptr) static_cast<void>(api().BackendDestroyDescriptor(d_));
}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (d_ != nullptr) static_cast<void>(api().BackendDestroyDescriptor(d_));
    d_ = std::exchange(other.d_, nullptr);
  }
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            std::int64_t count, const void* values) {
  const std::string what = "setting attribute " + std::to_string(static_cast<int>(name));
  check(api().BackendSetAttribute(d_, name, type, count, values), what.c_str());
  return *this;
}

Descriptor& Descriptor::set_int64(cudnnBackendAttributeName_t name, std::int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set_int64s(cudnnBackendAttributeName_t name,
                                   const std::vector<std::int64_t>& values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<std::int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t d = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

Descriptor& Descriptor::set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::finalize(const char* what) {
  check(api().BackendFinalize(d_), what);
  return *this;
}

// ---- Target

Target Target::handle(cudnnHandle_t handle) {
  Target t;
  t.handle_ = handle;
  return t;
}

Target Target::properties(const std::string& json) {
  Target t;
  t.device_ = Descriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  t.device_.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                static_cast<std::int64_t>(json.size()), json.data());
  t.device_.finalize("reading the device properties");
  return t;
}

// ---- Plan

void Plan::execute(cudnnHandle_t handle, const std::vector<std::pair<std::int64_t, void*>>& data,
                   void* workspace,
                   const std::vector<std::pair<std::int64_t, std::int32_t>>& int32_values) const {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  uids.reserve(data.size() + scalars_.size());
  pointers.reserve(data.size() + scalars_.size());
  for (const auto& [uid, ptr] : data) {
    uids.push_back(uid);
    pointers.push_back(ptr);
  }
  std::vector<std::pair<std::int64_t, std::uint32_t>> scalars = scalars_;
  for (const auto& [uid, value] : int32_values) {
    for (auto& [scalar_uid, bits] : scalars) {
      if (scalar_uid == uid) std::memcpy(&bits, &value, sizeof bits);
    }
  }
  for (auto& [uid, bits] : scalars) {
    uids.push_back(uid);
    pointers.push_back(&bits);  // cuDNN reads it, by value, during the call
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(uids.size()),
           uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<std::int64_t>(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize("finalizing the variant pack");
  check(api().BackendExecute(handle, plan_.get(), pack.get()), "executing the plan");
}

// ---- Graph

const Descriptor& Graph::desc(Uid uid) const {
  if (uid < 1 || uid > static_cast<Uid>(tensors_.size()))
    throw std::logic_error("cudnn::Graph: unknown tensor");
  return tensors_[static_cast<std::size_t>(uid - 1)].d;
}

Graph::Uid Graph::add_tensor(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& strides,
                             cudnnDataType_t type, bool is_virtual, bool by_value, std::uint32_t value) {
  if (dims.size() != strides.size()) throw std::logic_error("cudnn::Graph: dims and strides differ in rank");
  const Uid uid = static_cast<Uid>(tensors_.size()) + 1;
  Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const bool virt = is_virtual, value_kind = by_value;
  d.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &value_kind);
  d.finalize("finalizing a tensor");
  tensors_.push_back({std::move(d), by_value, value});
  return uid;
}

Graph::Uid Graph::tensor(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& strides,
                         cudnnDataType_t type) {
  return add_tensor(dims, strides, type, false, false, 0);
}

Graph::Uid Graph::virtual_tensor(const std::vector<std::int64_t>& dims,
                                 const std::vector<std::int64_t>& strides, cudnnDataType_t type) {
  return add_tensor(dims, strides, type, true, false, 0);
}

Graph::Uid Graph::scalar(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return add_tensor({1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true, bits);
}

Graph::Uid Graph::scalar_int32(std::int32_t value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return add_tensor({1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, false, true, bits);
}

void Graph::matmul(Uid a, Uid b, Uid c) {
  Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  mm.set_data_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize("finalizing a matmul");
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, desc(a))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, desc(b))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, desc(c))
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)
      .finalize("finalizing a matmul operation");
  parts_.push_back(std::move(mm));
  ops_.push_back(std::move(op));
}

void Graph::pointwise(cudnnPointwiseMode_t mode, Uid x, Uid y, cudnnDataType_t compute, Uid b, Uid t,
                      std::int64_t axis) {
  Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, compute);
  if (mode == CUDNN_POINTWISE_GEN_INDEX) pw.set_int64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize("finalizing a pointwise");
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, desc(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, desc(y));
  if (b > 0) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, desc(b));
  if (t > 0) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, desc(t));
  const float one = 1.f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one)
      .finalize("finalizing a pointwise operation");
  parts_.push_back(std::move(pw));
  ops_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t reduce_op, Uid x, Uid y) {
  Descriptor red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce_op)
      .set_data_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .finalize("finalizing a reduction");
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, desc(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, desc(y))
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red)
      .finalize("finalizing a reduction operation");
  parts_.push_back(std::move(red));
  ops_.push_back(std::move(op));
}

void Graph::reshape(Uid x, Uid y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, desc(x))
      .set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, desc(y))
      .finalize("finalizing a reshape operation");
  ops_.push_back(std::move(op));
}

namespace {

// The engine configurations cuDNN's heuristics propose for `graph` in `mode`, best first.
std::vector<Descriptor> heuristic_configs(const Descriptor& graph, const Target& target,
                                          cudnnBackendHeurMode_t mode) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (target.device() != nullptr) heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *target.device());
  heur.finalize("running the heuristics");
  std::int64_t count = 0;
  check(api().BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                  &count, nullptr),
        "counting the heuristics' results");
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t got = 0;
  if (count > 0) {
    check(api().BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    count, &got, raw.data()),
          "reading the heuristics' results");
  }
  configs.resize(static_cast<std::size_t>(got));
  return configs;
}

}  // namespace

Descriptor Graph::finalized_graph(const Target& target) const {
  std::vector<cudnnBackendDescriptor_t> raw_ops;
  raw_ops.reserve(ops_.size());
  for (const Descriptor& op : ops_) raw_ops.push_back(op.get());
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<std::int64_t>(raw_ops.size()), raw_ops.data());
  if (target.live_handle() != nullptr) {
    cudnnHandle_t h = target.live_handle();
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  }
  graph.finalize("finalizing the operation graph");
  return graph;
}

std::vector<Graph::Config> Graph::configs(const Descriptor& graph, const Target& target,
                                          std::string& failures) const {
  std::vector<Config> out;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> found;
    try {
      found = heuristic_configs(graph, target, mode);
    } catch (const std::runtime_error& e) {
      failures += std::string("; ") + e.what();
      continue;
    }
    for (std::size_t i = 0; i < found.size(); ++i) {
      Config c{std::move(found[i]), {}};
      Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t raw = engine.get();
      std::int64_t n = 0, engine_id = -1;
      check(api().BackendGetAttribute(c.d.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                      1, &n, &raw),
            "reading a configuration's engine");
      check(
          api().BackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &engine_id),
          "reading an engine's index");
      c.what.name = "engine " + std::to_string(engine_id) + ", configuration " + std::to_string(i + 1) +
                    " of " + std::to_string(found.size()) +
                    (mode == CUDNN_HEUR_MODE_A ? " from heuristics A" : " from the fallback list");
      check(api().BackendGetAttribute(c.d.get(), CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                      nullptr, &c.what.workspace_bytes),
            "reading a configuration's workspace size");
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<Graph::Candidate> Graph::candidates(const Target& target) const {
  const Descriptor graph = finalized_graph(target);
  std::string failures;
  std::vector<Candidate> out;
  for (Config& c : configs(graph, target, failures)) out.push_back(std::move(c.what));
  return out;
}

Plan Graph::build(const Target& target) const {
  Descriptor graph = finalized_graph(target);
  std::string failures;
  for (Config& c : configs(graph, target, failures)) {
    try {
      Plan plan;
      plan.plan_ = Descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.plan_.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, c.d);
      // A live target's plan takes its device from the graph's handle (as cuDNN's frontend builds it).
      if (target.device() != nullptr)
        plan.plan_.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, *target.device());
      plan.plan_.finalize("building the execution plan");
      check(api().BackendGetAttribute(plan.plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                      CUDNN_TYPE_INT64, 1, nullptr, &plan.workspace_bytes_),
            "reading the plan's workspace size");
      plan.engine_ = c.what.name;
      plan.config_ = std::move(c.d);
      plan.graph_ = std::move(graph);
      for (std::size_t u = 0; u < tensors_.size(); ++u) {
        if (tensors_[u].by_value) plan.scalars_.emplace_back(static_cast<Uid>(u) + 1, tensors_[u].value);
      }
      return plan;
    } catch (const std::runtime_error& e) {
      failures += std::string("; ") + e.what();
    }
  }
  throw std::runtime_error("cuDNN has no engine for this graph" + failures);
}

}  // namespace ptrain::kernels::cuda::cudnn
