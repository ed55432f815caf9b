// Device memory for the CUDA op tests: an RAII cudaMalloc/cudaFree buffer, filled from and read back
// to host float (or int) vectors, stored as F32 or BF16 (BF16 rounded to nearest even as the device
// rounds, kernels/bf16.h). Copies synchronise the whole device first and after, so they are ordered
// with the ops' non-blocking compute stream without the tests having to think about it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/buffer.h"
#include "kernels/cuda/check.cuh"
#include "tests/kernels/kernel_test_util.h"

namespace ptrain::kernels::test {

class DeviceBuffer {
 public:
  DeviceBuffer(std::size_t count, DType dtype) : count_(count), dtype_(dtype) {
    PTRAIN_CUDA_CHECK(cudaMalloc(&ptr_, bytes() > 0 ? bytes() : 1));
  }
  // A float vector stored as `dtype` (F32 or BF16).
  DeviceBuffer(const Vec& host, DType dtype) : DeviceBuffer(host.size(), dtype) { upload(host); }
  explicit DeviceBuffer(const IVec& host) : DeviceBuffer(host.size(), DType::I32) {
    copy_in(host.data(), bytes());
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) static_cast<void>(cudaFree(ptr_));
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(other.count_), dtype_(other.dtype_) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  Buf buf() const { return Buf{ptr_, dtype_}; }
  // A view starting `offset` elements in (misaligned views for the alignment fallbacks).
  Buf at(std::size_t offset) const {
    return Buf{static_cast<char*>(ptr_) + offset * dtype_size(dtype_), dtype_};
  }
  std::size_t size() const { return count_; }

  void upload(const Vec& host) {
    REQUIRE(host.size() == count_);
    if (dtype_ == DType::F32) {
      copy_in(host.data(), bytes());
    } else {
      std::vector<std::uint16_t> bits(host.size());
      for (std::size_t i = 0; i < host.size(); ++i) bits[i] = f32_to_bf16(host[i]);
      copy_in(bits.data(), bytes());
    }
  }

  // The values of an I32 buffer.
  IVec download_ints() const {
    REQUIRE(dtype_ == DType::I32);
    IVec out(count_);
    copy_out(out.data(), bytes());
    return out;
  }

  // The bytes of an FP8 buffer (E4M3 or E5M2 codes), and codes uploaded into one.
  std::vector<std::uint8_t> download_codes() const {
    REQUIRE(dtype_size(dtype_) == 1);
    std::vector<std::uint8_t> out(count_);
    copy_out(out.data(), bytes());
    return out;
  }
  void upload_codes(const std::vector<std::uint8_t>& codes) {
    REQUIRE((dtype_size(dtype_) == 1 && codes.size() == count_));
    copy_in(codes.data(), bytes());
  }

  // The values, widened to float.
  Vec download() const {
    Vec out(count_);
    if (dtype_ == DType::F32) {
      copy_out(out.data(), bytes());
    } else {
      std::vector<std::uint16_t> bits(count_);
      copy_out(bits.data(), bytes());
      for (std::size_t i = 0; i < count_; ++i) out[i] = bf16_to_f32(bits[i]);
    }
    return out;
  }

 private:
  std::size_t bytes() const { return count_ * dtype_size(dtype_); }
  void copy_in(const void* src, std::size_t n) {
    PTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    if (n > 0) PTRAIN_CUDA_CHECK(cudaMemcpy(ptr_, src, n, cudaMemcpyHostToDevice));
    PTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void copy_out(void* dst, std::size_t n) const {
    PTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    if (n > 0) PTRAIN_CUDA_CHECK(cudaMemcpy(dst, ptr_, n, cudaMemcpyDeviceToHost));
  }

  void* ptr_ = nullptr;
  std::size_t count_ = 0;
  DType dtype_ = DType::F32;
};

}  // namespace ptrain::kernels::test
