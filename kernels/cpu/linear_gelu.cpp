// Linear + GELU (ops.h): on the CPU exactly the two ops in sequence, through their entries, so the fused
// ops are bit for bit the unfused pair in every dtype (each entry stages and rounds its own outputs,
// bf16_staging.h: pre and the intermediate d_pre are rounded where the pair rounds them). Fusing saves
// a pass over memory on CUDA (cuBLASLt's epilogues); here it would only be a second copy of the math.
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {

void linear_gelu_forward(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N, int K) {
  check_linear_gelu_forward("cpu", out, pre, in, weight, bias, M, N, K);
  linear_forward(pre, in, weight, bias, M, N, K);
  gelu_forward(out, pre, std::int64_t{M} * N, Buf{});
}

void linear_backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf pre, int M,
                          int N, int K) {
  check_linear_backward_gelu("cpu", d_pre, d_weight, d_bias, d_out, in, weight, pre, M, N, K);
  linear_backward(d_pre, d_weight, d_bias, d_out, in, weight, M, N, K);
  gelu_backward(d_pre, d_pre, pre, std::int64_t{M} * K, Buf{});  // in place: ops.h lets d_in alias d_out
}

}  // namespace ptrain::kernels::cpu
