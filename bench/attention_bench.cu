// Microbenchmark of the own causal GQA flash-attention kernels (kernels/cuda/attention.cu): bf16
// forward and backward, timed with CUDA events, reported as TFLOP/s of the causal work
// (forward 4*B*T*T*Hq*D/2 flops, backward 2.5x that: the usual FlashAttention accounting, which
// does not count the backward's recomputation of S and dP).
//
// Not part of the CMake build; build and run by hand on a machine with a GPU, from the repo root:
//   nvcc -std=c++20 -O3 -arch=sm_90 -I. bench/attention_bench.cu kernels/cuda/attention.cu \
//        kernels/buffer.cpp kernels/op_checks.cpp -lcublasLt -o /tmp/attention_bench && /tmp/attention_bench
// (-arch=sm_80 for A100.) With no arguments it runs the reference shapes
//   B=8 T=1024 H=12 D=64            (GPT-2 124M, as bench/jobs: per 8 sequences)
//   B=2 T=4096 Hq=32 Hkv=8 D=64     (the 1.25B Llama of bench/jobs, one microbatch)
//   B=1 T=4096 Hq=32 Hkv=8 D=128    (Llama-3-8B-like GQA)
// or one shape given as: attention_bench B T Hq Hkv D [f32]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/check.cuh"

namespace {

using ptrain::kernels::Buf;
using ptrain::kernels::DType;

// Deterministic pseudo-random values in [lo, hi) (a hash of the index).
template <typename T>
__global__ void fill_random(T* p, long long n, std::uint32_t seed, float lo, float hi) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    const float u = static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
    p[i] = static_cast<T>(lo + (hi - lo) * u);
  }
}

struct DeviceMem {
  void* ptr = nullptr;
  explicit DeviceMem(std::size_t bytes) { PTRAIN_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
  ~DeviceMem() { cudaFree(ptr); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

template <typename T>
void randomize(void* p, long long n, std::uint32_t seed, float lo, float hi) {
  fill_random<T><<<1024, 256>>>(static_cast<T*>(p), n, seed, lo, hi);
  PTRAIN_CUDA_CHECK(cudaGetLastError());
}

// Count of non-finite values among the first n elements (host copy).
long long non_finite(const void* p, long long n, DType t) {
  long long bad = 0;
  if (t == DType::F32) {
    std::vector<float> h(n);
    PTRAIN_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
    for (float x : h) bad += !std::isfinite(x);
  } else {
    std::vector<__nv_bfloat16> h(n);
    PTRAIN_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    for (__nv_bfloat16 x : h) bad += !std::isfinite(__bfloat162float(x));
  }
  return bad;
}

void run(int B, int T, int Hq, int Hkv, int D, DType dt, cudaStream_t stream) {
  const long long nq = 1LL * B * T * Hq * D, nkv = 1LL * B * T * Hkv * D, nl = 1LL * B * Hq * T;
  const std::size_t es = dt == DType::BF16 ? 2 : 4;
  DeviceMem q(nq * es), k(nkv * es), v(nkv * es), out(nq * es), dout(nq * es), dq(nq * es), dk(nkv * es),
      dv(nkv * es), lse(nl * 4);
  auto fill = [&](void* p, long long n, std::uint32_t seed, float lo, float hi) {
    if (dt == DType::BF16) {
      randomize<__nv_bfloat16>(p, n, seed, lo, hi);
    } else {
      randomize<float>(p, n, seed, lo, hi);
    }
  };
  fill(q.ptr, nq, 1, -2.0f, 2.0f);
  fill(k.ptr, nkv, 2, -2.0f, 2.0f);
  fill(v.ptr, nkv, 3, -1.0f, 1.0f);
  fill(dout.ptr, nq, 4, -1.0f, 1.0f);
  PTRAIN_CUDA_CHECK(cudaDeviceSynchronize());

  const Buf bq{q.ptr, dt}, bk{k.ptr, dt}, bv{v.ptr, dt}, bo{out.ptr, dt}, bdo{dout.ptr, dt}, bdq{dq.ptr, dt},
      bdk{dk.ptr, dt}, bdv{dv.ptr, dt}, bl{lse.ptr, DType::F32};
  const auto shape = ptrain::kernels::AttentionShape::self_attention(B, T, Hq, Hkv, D);
  auto forward = [&] { ptrain::kernels::cuda::attention_forward(stream, bo, bl, bq, bk, bv, shape); };
  auto backward = [&] {
    ptrain::kernels::cuda::attention_backward(stream, bdq, bdk, bdv, bdo, bq, bk, bv, bo, bl, shape);
  };

  cudaEvent_t e0, e1, e2;
  PTRAIN_CUDA_CHECK(cudaEventCreate(&e0));
  PTRAIN_CUDA_CHECK(cudaEventCreate(&e1));
  PTRAIN_CUDA_CHECK(cudaEventCreate(&e2));
  for (int i = 0; i < 3; ++i) {  // warm-up (also sets the shared-memory attributes)
    forward();
    backward();
  }
  PTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  constexpr int kIters = 20;
  PTRAIN_CUDA_CHECK(cudaEventRecord(e0, stream));
  for (int i = 0; i < kIters; ++i) forward();
  PTRAIN_CUDA_CHECK(cudaEventRecord(e1, stream));
  for (int i = 0; i < kIters; ++i) backward();
  PTRAIN_CUDA_CHECK(cudaEventRecord(e2, stream));
  PTRAIN_CUDA_CHECK(cudaEventSynchronize(e2));
  float ms_f = 0.0f, ms_b = 0.0f;
  PTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms_f, e0, e1));
  PTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms_b, e1, e2));
  ms_f /= kIters;
  ms_b /= kIters;
  const double fwd_flops = 4.0 * B * T * static_cast<double>(T) * Hq * D / 2.0;
  const double bwd_flops = 2.5 * fwd_flops;
  const long long bad = non_finite(out.ptr, nq, dt) + non_finite(dq.ptr, nq, dt) + non_finite(dk.ptr, nkv, dt) +
                        non_finite(dv.ptr, nkv, dt);
  std::printf("%-4s B=%d T=%d Hq=%d Hkv=%d D=%d: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms %.1f TFLOP/s | "
              "fwd+bwd %.1f TFLOP/s%s\n",
              dt == DType::BF16 ? "bf16" : "f32", B, T, Hq, Hkv, D, ms_f, fwd_flops / ms_f * 1e-9, ms_b,
              bwd_flops / ms_b * 1e-9, (fwd_flops + bwd_flops) / (ms_f + ms_b) * 1e-9,
              bad ? (" (" + std::to_string(bad) + " non-finite outputs!)").c_str() : "");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cudaDeviceProp prop{};
    PTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    cudaStream_t stream = nullptr;
    PTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (argc >= 6) {
      const DType dt = argc >= 7 && std::string(argv[6]) == "f32" ? DType::F32 : DType::BF16;
      run(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), dt,
          stream);
    } else {
      run(8, 1024, 12, 12, 64, DType::BF16, stream);
      run(2, 4096, 32, 8, 64, DType::BF16, stream);
      run(1, 4096, 32, 8, 128, DType::BF16, stream);
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
