// cuBLASLt matmul wrapper (see gemm.cuh). Descriptors are built per call (host-only, microseconds)
// and released by RAII; the heuristic is told the real alignment of every pointer, because Buf views
// into arenas need not be 256-byte aligned (cuBLASLt's default assumption), and its answer is kept
// per descriptor (HeuristicCache): a training step repeats the same few shapes thousands of times.
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/fp8.h"

namespace ptrain::kernels::cuda {
namespace {

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { static_cast<void>(cublasLtMatmulDescDestroy(p)); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const {
    static_cast<void>(cublasLtMatrixLayoutDestroy(p));
  }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const {
    static_cast<void>(cublasLtMatmulPreferenceDestroy(p));
  }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::BF16: return CUDA_R_16BF;
    case DType::E4M3: return CUDA_R_8F_E4M3;
    case DType::E5M2: return CUDA_R_8F_E5M2;
    case DType::F32:
    case DType::I32: break;
  }
  return CUDA_R_32F;
}

bool is_fp8_gemm(const GemmArgs& g) { return is_fp8(g.a_type); }

// Largest power of two dividing the address, up to 256 (cuBLASLt's preference unit).
std::uint32_t alignment_of(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && addr % align != 0) align /= 2;
  return align;
}

Layout make_layout(DType t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  cublasLtMatrixLayout_t raw = nullptr;
  PTRAIN_CUDA_CHECK(cublasLtMatrixLayoutCreate(&raw, data_type(t), static_cast<std::uint64_t>(rows),
                                               static_cast<std::uint64_t>(cols), ld));
  return Layout(raw);
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  PTRAIN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// The epilogue's operands as cuBLASLt takes them: the GELU input's leading dimension "must be divisible
// by 8 and be no less than the number of rows" (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD). For
// the bias and aux pointers it states no alignment; we ask 16 bytes, the alignment its vectorised
// epilogues are used with elsewhere (llm.c requires it of every operand), and take the unfused path
// otherwise.
bool epilogue_operands_usable(const GemmArgs& g) {
  if (g.bias != nullptr && !aligned16(g.bias)) return false;
  // cuBLASLt's FP8 kernels do not read a bias of D's type when D is FP32: their default bias type
  // there is BF16 (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: "fp8 kernels with an output type
  // of CUDA_R_32F" are the exception to "the same type as ... Dtype"; PyTorch's _scaled_mm likewise
  // refuses a bias with a Float32 output). An F32 bias would be read as pairs of BF16 halves:
  // broadcast it instead (the caller's fallback), as ops.h's F32 FP8 GEMM with a bias needs.
  if (is_fp8_gemm(g) && g.bias != nullptr && g.d_type != DType::BF16) return false;
  if (g.bias_grad != nullptr && (!aligned16(g.bias_grad) || g.bias != nullptr || g.gelu != GemmGelu::None))
    return false;
  return g.gelu == GemmGelu::None || (aligned16(g.aux) && g.ld_aux % 8 == 0 && g.ld_aux >= g.m);
}

cublasLtEpilogue_t epilogue_of(const GemmArgs& g) {
  switch (g.gelu) {
    case GemmGelu::Forward:
      return g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmGelu::Backward:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmGelu::None:
      break;
  }
  if (g.bias_grad != nullptr) return CUBLASLT_EPILOGUE_BGRADB;
  return g.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// Everything cublasLtMatmulAlgoGetHeuristic is told, as one key.
using HeuristicKey = std::array<std::int64_t, 23>;

HeuristicKey heuristic_key(const LaunchContext& ctx, const GemmArgs& g) {
  auto align = [](const void* p) { return p != nullptr ? std::int64_t{alignment_of(p)} : std::int64_t{0}; };
  return {reinterpret_cast<std::intptr_t>(ctx.lt), static_cast<std::int64_t>(ctx.lt_workspace_bytes),
          g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldd,
          static_cast<std::int64_t>(g.a_type), static_cast<std::int64_t>(g.b_type),
          static_cast<std::int64_t>(g.d_type), static_cast<std::int64_t>(epilogue_of(g)), g.ld_aux,
          align(g.a), align(g.b), align(g.d), align(g.bias), align(g.aux), align(g.bias_grad),
          g.beta != 0.0f, g.fp8_fast_accum};
}

// The heuristic's answer per key, for the process: an algorithm, or nullopt where it offered none
// (the caller declines). An entry changes once at most, to nullopt when the launch refused its
// algorithm; a found one is copied out under the lock.
class HeuristicCache {
 public:
  bool find(const HeuristicKey& key, std::optional<cublasLtMatmulAlgo_t>& algo) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = algos_.find(key);
    if (it == algos_.end()) return false;
    algo = it->second;
    return true;
  }
  void keep(const HeuristicKey& key, const std::optional<cublasLtMatmulAlgo_t>& algo) {
    const std::lock_guard<std::mutex> lock(mutex_);
    algos_.emplace(key, algo);
  }
  void refuse(const HeuristicKey& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    algos_.erase(key);  // (nvcc 13's front end fails on optional::reset here)
    algos_.emplace(key, std::nullopt);
  }

 private:
  mutable std::mutex mutex_;
  std::map<HeuristicKey, std::optional<cublasLtMatmulAlgo_t>> algos_;
};

HeuristicCache& heuristic_cache() {
  static HeuristicCache cache;
  return cache;
}

template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value) {
  PTRAIN_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// The heuristic's best algorithm for the descriptor, or nullopt where it offers none.
std::optional<cublasLtMatmulAlgo_t> choose_algo(const LaunchContext& ctx, const GemmArgs& g,
                                                cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d) {
  cublasLtMatmulPreference_t raw_pref = nullptr;
  PTRAIN_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  const Preference pref(raw_pref);
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{ctx.lt_workspace_bytes});
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.a));
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.b));
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.d));
  set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.d));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(ctx.lt, desc, a, b, d, d, pref.get(), 1, &heuristic, &found);
  // No algorithm: declined. With an epilogue (the unfused path always exists) or FP8 operands (the
  // validation refuses the shapes cuBLASLt's FP8 kernels cannot take; fp8_gemm.cu says which) any
  // heuristic failure declines too, since cuBLASLt may report an unsupported combination as other
  // than NOT_SUPPORTED. A result counts only if its own state is success (cublasLt.h,
  // cublasLtMatmulAlgoGetHeuristic).
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return std::nullopt;
  if (status != CUBLAS_STATUS_SUCCESS && (epilogue_of(g) != CUBLASLT_EPILOGUE_DEFAULT || is_fp8_gemm(g)))
    return std::nullopt;
  PTRAIN_CUDA_CHECK(status);
  if (found == 0 || heuristic.state != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  return heuristic.algo;
}

}  // namespace

bool try_gemm(const LaunchContext& ctx, const GemmArgs& g) {
  if (!epilogue_operands_usable(g)) return false;
  cublasLtMatmulDesc_t raw_desc = nullptr;
  PTRAIN_CUDA_CHECK(cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const MatmulDesc desc(raw_desc);
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  // The heuristic reads the bias and aux pointers' values for their alignment: set them before it runs.
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_of(g));
  if (g.bias != nullptr) set_desc(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.bias_grad != nullptr) set_desc(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias_grad);
  if (g.gelu != GemmGelu::None) {
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ld_aux);
  }

  if (is_fp8_gemm(g)) {
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.a_scale));
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.b_scale));
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(g.fp8_fast_accum));
  }

  // Stored shapes (column-major): op(A) is [m, k], so A is [m, k] or, transposed, [k, m].
  const Layout a =
      g.trans_a ? make_layout(g.a_type, g.k, g.m, g.lda) : make_layout(g.a_type, g.m, g.k, g.lda);
  const Layout b =
      g.trans_b ? make_layout(g.b_type, g.n, g.k, g.ldb) : make_layout(g.b_type, g.k, g.n, g.ldb);
  const Layout d = make_layout(g.d_type, g.m, g.n, g.ldd);

  const HeuristicKey key = heuristic_key(ctx, g);
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (!heuristic_cache().find(key, algo)) {
    algo = choose_algo(ctx, g, desc.get(), a.get(), b.get(), d.get());
    heuristic_cache().keep(key, algo);
  }
  if (!algo) return false;

  const float alpha = 1.0f;
  const cublasStatus_t run = cublasLtMatmul(ctx.lt, desc.get(), &alpha, g.a, a.get(), g.b, b.get(), &g.beta, g.d,
                                            d.get(), g.d, d.get(), &*algo, ctx.lt_workspace,
                                            ctx.lt_workspace_bytes, ctx.stream);
  // An epilogue the heuristic offered but the launch refuses: declined too (nothing was enqueued), and
  // for good (the cache keeps the refusal). For FP8 inputs cuBLASLt does not document the refusal's
  // status, so there INVALID_VALUE counts too: the caller's fallback (the plain GEMM, then the
  // epilogue's own kernel) computes the same.
  const bool refused = run == CUBLAS_STATUS_NOT_SUPPORTED || (is_fp8_gemm(g) && run == CUBLAS_STATUS_INVALID_VALUE);
  if (refused && epilogue_of(g) != CUBLASLT_EPILOGUE_DEFAULT) {
    heuristic_cache().refuse(key);
    return false;
  }
  PTRAIN_CUDA_CHECK(run);
  return true;
}

void gemm(const LaunchContext& ctx, const GemmArgs& g) {
  if (!try_gemm(ctx, g)) {
    throw std::runtime_error("cuBLASLt has no algorithm for the GEMM m=" + std::to_string(g.m) +
                             " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) + " (A/B " +
                             to_string(g.a_type) + "/" + to_string(g.b_type) + ", D " + to_string(g.d_type) + ")");
  }
}

}  // namespace ptrain::kernels::cuda
