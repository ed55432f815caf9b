// BF16 causal attention through cuDNN's fused flash attention (its graph API, cudnn_graph.h), beside
// ptrain's own kernels (attention.cuh), which stay the F32 path, the fallback and the reference.
//
// Same contract as attention.cuh (ops.h attention_forward / attention_backward): q, out, d_q
// [B, Tq, Hq, D], k, v [B, Tk, Hkv, D], lse [B, Hq, Tq] F32 in natural log, row i sees keys
// 0 .. q_pos0 + i. The graphs describe those layouts with strides (no copies): cuDNN's [b, h, s, d]
// view of [B, T, H, D] has strides {T*H*D, D, H*D, 1}; the causal mask is row + q_pos0 >= col
// (AttentionMask).
//
// The graphs are NVIDIA's published SDPA pattern (the one cuDNN's frontend emits and cuDNN fuses into
// one kernel): forward S = scale * Q K^T, masked, softmax with stats (max + log sum), O = P V;
// backward recomputes P from the stats and forms dV = P^T dO, dS = P (dO V^T - rowsum(dO * O)) * scale,
// dK = dS^T Q, dQ = dS K, GQA's kv gradients summed over the group by a reduction.
// Two backward variants: `Fast` accumulates dQ in an F32 buffer with atomics (run-to-run bits may
// differ), `Deterministic` has cuDNN stage dP in a B*Hq*Tq*Tk BF16 workspace instead (bitwise
// reproducible, much more memory). PTRAIN_CUDNN_ATTENTION=auto|fast|deterministic|off picks
// (kernels/cudnn_attention_mode.h; default auto: the fast backward, and each shape and direction
// kept on cuDNN only where it ran no slower than ptrain's kernels, timed once at the first call).
//
// Plans are built once per shape (the first call pays for cuDNN's heuristics and, for some engines,
// its runtime compilation), cached, and run on the compute stream; their workspace is stream-ordered
// scratch. A plan's first run is checked against ptrain's own kernels on the same inputs
// (cudnn_attention_check.h) before cuDNN is trusted with the shape. A shape cuDNN cannot fuse (or any cuDNN error while planning) is remembered and answered
// with false, and the caller runs its own kernels: the first such answer per shape is logged once
// on stderr with cuDNN's reason, as is the first plan built (cuDNN's version and engine).
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention_shape.h"
#include "kernels/buffer.h"
#include "kernels/cudnn_attention_mode.h"
#include "kernels/cuda/cudnn_graph.h"
#include "kernels/cuda/launch_context.h"

namespace ptrain::kernels::cuda {

// The oldest cuDNN the path takes (its frontend works around a backward bug up to 9.15; the graphs
// were checked against 9.19): older ones decline, with the reason, to our kernels.
inline constexpr std::size_t kMinCudnnVersion = 91600;

// The mask a shape needs: the causal diagonal; the diagonal shifted by q_pos0 (a later query chunk,
// the value given at each run, so that every offset shares one plan); none where every query row
// sees every key (q_pos0 >= Tk - 1: ring attention's blocks with an earlier chunk's keys).
enum class AttentionMask { Causal, Shifted, None };
AttentionMask attention_mask(const AttentionShape& s);

// The graphs (exposed for the device-less plan test) and the uids of their non-virtual tensors.
struct AttentionForwardGraph {
  cudnn::Graph graph;
  cudnn::Graph::Uid q = 0, k = 0, v = 0, out = 0, lse = 0;
  cudnn::Graph::Uid q_pos0 = 0;  // the shift's INT32 scalar (AttentionMask::Shifted), else 0
};
struct AttentionBackwardGraph {
  cudnn::Graph graph;
  cudnn::Graph::Uid q = 0, k = 0, v = 0, out = 0, d_out = 0, lse = 0, d_q = 0, d_k = 0, d_v = 0;
  cudnn::Graph::Uid row_dot = 0;    // rowsum(dO * O), [B, Hq, Tq] F32: a buffer the caller supplies
  cudnn::Graph::Uid d_q_accum = 0;  // Fast: dQ's F32 accumulator [B, Hq, Tq, D]; 0 when Deterministic
  cudnn::Graph::Uid q_pos0 = 0;     // as the forward's
};
AttentionForwardGraph attention_forward_graph(const AttentionShape& s);
AttentionBackwardGraph attention_backward_graph(const AttentionShape& s, bool deterministic);

class CudnnAttention {
 public:
  CudnnAttention() = default;
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Run the op through cuDNN if the mode allows, the tensors are BF16 and cuDNN has a plan for the
  // shape; false (nothing enqueued) otherwise.
  bool forward(const LaunchContext& ctx, Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& s);
  bool backward(const LaunchContext& ctx, Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v, Buf out,
                Buf lse, const AttentionShape& s);

 private:
  struct Plans {
    std::optional<AttentionForwardGraph> fwd_graph;
    std::optional<AttentionBackwardGraph> bwd_graph;
    std::optional<cudnn::Plan> fwd, bwd;
    bool fwd_failed = false, bwd_failed = false;
    bool fwd_checked = false, bwd_checked = false;  // first run checked (and under auto timed) against ptrain's kernels
  };
  using Key = std::tuple<int, int, int, int, int, int, int>;
  using Bindings = std::vector<std::pair<std::int64_t, void*>>;  // (tensor uid, device pointer)
  cudnnHandle_t handle(const LaunchContext& ctx);
  Plans& plans(const AttentionShape& s);
  // Enqueues `plan` with the shape's q_pos0 (when the graph has that scalar); throws
  // std::runtime_error where cuDNN refuses.
  void execute(const cudnn::Plan& plan, const AttentionShape& s, const Bindings& data, void* workspace,
               cudnn::Graph::Uid q_pos0);
  // execute on ctx's stream; where cuDNN refuses (an error status from the launch) marks the shape
  // failed and answers false, so that the caller's own kernels compute it.
  bool run(const LaunchContext& ctx, std::optional<cudnn::Plan>& plan, bool& failed, const char* which,
           const AttentionShape& s, const Bindings& data, void* workspace, cudnn::Graph::Uid q_pos0);
  // After a plan's run: true once its first run agreed with ptrain's kernels (`check`,
  // cudnn_attention_check.h) and, under PTRAIN_CUDNN_ATTENTION=auto, ran no slower than they do
  // (`cudnn_seconds` against `own_seconds`, timed once: one decision per plan, so a shifted mask's
  // holds for every q_pos0); otherwise the shape is declined, logged (false: the caller's kernels
  // compute it again).
  bool trusted(std::optional<cudnn::Plan>& plan, bool& checked, bool& failed, const char* which,
               const AttentionShape& s, const std::function<std::string()>& check,
               const std::function<double()>& cudnn_seconds, const std::function<double()>& own_seconds);
  void report_first_plan(const cudnn::Plan& plan);  // once per process, on stderr
  void report_failure(const char* which, const AttentionShape& s, const std::string& why);

  std::mutex mutex_;
  cudnnHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the one handle_ is bound to
  std::map<Key, Plans> plans_;
  bool reported_plan_ = false;
};

}  // namespace ptrain::kernels::cuda
