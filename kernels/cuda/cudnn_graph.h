// A small C++ layer over cuDNN's graph (backend) API, enough to describe a fused operation graph,
// build an execution plan for it and run the plan: what kernels/cuda/cudnn_attention.cu needs.
//
//   Graph g;
//   auto q = g.tensor({B, H, T, D}, strides, CUDNN_DATA_BFLOAT16);        // a tensor the caller passes
//   auto s = g.virtual_tensor({B, H, T, T}, packed, CUDNN_DATA_FLOAT);    // lives inside the fused kernel
//   g.matmul(q, kt, s); g.pointwise(CUDNN_POINTWISE_MUL, s, g.scalar(0.125f), scaled); ...
//   Plan plan = g.build(target);     // target: a cuDNN handle, or a device description (no GPU needed)
//   plan.execute(handle, {{q, q_ptr}, ...}, workspace);
//
// Tensors are named by the uid Graph gives them; dims and strides are in elements, outermost first.
// Scalars are passed by value (their value is kept by the plan and handed to cuDNN at each run; an
// INT32 one may be given another value at a run, so that one plan serves every value).
// Everything that fails throws std::runtime_error carrying cuDNN's own message
// (cudnnGetLastErrorString), so that a shape the library cannot fuse says why.
//
// The device description (`Target::properties`) is cuDNN's device-less mode (cuDNN >= 9.8): a plan
// is built for a GPU described in JSON without one present, which is how the tests check on a CPU
// machine that cuDNN accepts the graphs and how much workspace they take.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ptrain::kernels::cuda::cudnn {

// cuDNN's entry points this layer uses, from libcudnn.so.9 opened at first use (dlopen: the build's
// cuDNN directory first, the version the graphs were checked against, then the loader's search
// path): ptrain links no cuDNN, so a machine without it still runs the CUDA backend, attention on
// ptrain's own kernels.
struct Api {
  decltype(&::cudnnGetVersion) GetVersion;
  decltype(&::cudnnGetErrorString) GetErrorString;
  decltype(&::cudnnGetLastErrorString) GetLastErrorString;
  decltype(&::cudnnCreate) Create;
  decltype(&::cudnnDestroy) Destroy;
  decltype(&::cudnnSetStream) SetStream;
  decltype(&::cudnnBackendCreateDescriptor) BackendCreateDescriptor;
  decltype(&::cudnnBackendDestroyDescriptor) BackendDestroyDescriptor;
  decltype(&::cudnnBackendSetAttribute) BackendSetAttribute;
  decltype(&::cudnnBackendGetAttribute) BackendGetAttribute;
  decltype(&::cudnnBackendFinalize) BackendFinalize;
  decltype(&::cudnnBackendExecute) BackendExecute;
};
// The loaded table; throws std::runtime_error("cuDNN is not available: ...") where the library or an
// entry point is missing (every call, the first attempt's reason).
const Api& api();

// Throws std::runtime_error("cuDNN <what>: <status> (<cuDNN's last message>)") unless status is success.
void check(cudnnStatus_t status, const char* what);

// One backend descriptor, owned (destroyed with it).
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept : d_(std::exchange(other.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count,
                  const void* values);
  Descriptor& set_int64(cudnnBackendAttributeName_t name, std::int64_t value);
  Descriptor& set_int64s(cudnnBackendAttributeName_t name, const std::vector<std::int64_t>& values);
  Descriptor& set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  Descriptor& finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Where a plan will run: a live handle (the GPU current when it was created), or a GPU described by
// cuDNN's device-properties JSON (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION).
class Target {
 public:
  static Target handle(cudnnHandle_t handle);
  static Target properties(const std::string& json);
  cudnnHandle_t live_handle() const { return handle_; }
  const Descriptor* device() const { return handle_ == nullptr ? &device_ : nullptr; }

 private:
  cudnnHandle_t handle_ = nullptr;
  Descriptor device_;
};

// An execution plan and what running it takes.
class Plan {
 public:
  std::int64_t workspace_bytes() const { return workspace_bytes_; }
  const std::string& engine() const { return engine_; }  // the candidate it came from (Graph::Candidate)
  // Runs the plan on the handle's stream. `data` gives a device pointer for every non-virtual,
  // non-scalar tensor of the graph; `workspace` holds workspace_bytes() (may be null when 0).
  // `int32_values`: by-value INT32 scalars given another value for this run (uid, value).
  void execute(cudnnHandle_t handle, const std::vector<std::pair<std::int64_t, void*>>& data, void* workspace,
               const std::vector<std::pair<std::int64_t, std::int32_t>>& int32_values = {}) const;

 private:
  friend class Graph;
  Descriptor graph_, config_;  // what the plan was built from, kept as long as it lives
  Descriptor plan_;
  std::int64_t workspace_bytes_ = 0;
  std::string engine_;
  std::vector<std::pair<std::int64_t, std::uint32_t>> scalars_;  // by-value tensors: uid, value's 4 bytes
};

class Graph {
 public:
  using Uid = std::int64_t;

  Uid tensor(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& strides,
             cudnnDataType_t type);
  Uid virtual_tensor(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& strides,
                     cudnnDataType_t type);
  Uid scalar(float value);               // by value, F32
  Uid scalar_int32(std::int32_t value);  // by value, INT32

  // c = a @ b over the last two dims, batched over the leading ones (broadcast where a dim is 1 or
  // divides: GQA's heads). Accumulates in F32.
  void matmul(Uid a, Uid b, Uid c);
  // y = mode(x[, b][, t]) elementwise with broadcasting, computed in `compute`; GEN_INDEX writes the
  // index along `axis`. BINARY_SELECT: y = t ? x : b.
  void pointwise(cudnnPointwiseMode_t mode, Uid x, Uid y, cudnnDataType_t compute = CUDNN_DATA_FLOAT,
                 Uid b = -1, Uid t = -1, std::int64_t axis = -1);
  // y = reduce(x) over the dims where y's dim is 1.
  void reduction(cudnnReduceTensorOp_t op, Uid x, Uid y);
  // y = x reinterpreted with y's dims and strides (a transpose, in a fused graph).
  void reshape(Uid x, Uid y);

  // The engine configurations cuDNN offers for the graph on `target`, best first (heuristics mode A,
  // then its fallback list), each past cuDNN's support checks, with the workspace it needs. Building
  // a plan from one can still fail: loading its kernels needs the GPU.
  struct Candidate {
    std::string name;  // e.g. "engine 8, configuration 1 of 3 from heuristics A"
    std::int64_t workspace_bytes = 0;
  };
  std::vector<Candidate> candidates(const Target& target) const;

  // The plan of the first candidate that cuDNN can build for `target`; throws with every
  // candidate's failure when none can.
  Plan build(const Target& target) const;

 private:
  struct TensorEntry {
    Descriptor d;
    bool by_value = false;
    std::uint32_t value = 0;  // a scalar's bits (F32 or INT32)
  };
  struct Config {
    Descriptor d;
    Candidate what;
  };
  const Descriptor& desc(Uid uid) const;
  Descriptor finalized_graph(const Target& target) const;
  // The candidates' descriptors, and the failures of the heuristics themselves in `failures`.
  std::vector<Config> configs(const Descriptor& graph, const Target& target, std::string& failures) const;
  Uid add_tensor(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& strides,
                 cudnnDataType_t type, bool is_virtual, bool by_value, std::uint32_t value);

  std::vector<TensorEntry> tensors_;  // uid = index + 1
  std::vector<Descriptor> ops_;
  std::vector<Descriptor> parts_;  // pointwise/matmul/reduction descriptors the ops refer to
};

}  // namespace ptrain::kernels::cuda::cudnn
