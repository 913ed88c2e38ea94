// What every gpu-labelled test shares: skipping with the reason when this machine has no
// usable CUDA device, and device buffers that free themselves.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/devices.hpp"

namespace troupe::testing {

/// Why CUDA cannot run here ("" when a device is usable): no driver, no device, ...
inline std::string no_gpu_reason() {
  auto count = kernels::cuda_device_count();
  if (!count) return count.error().message;
  if (*count == 0) return "no CUDA device on this machine";
  return "";
}

#define TROUPE_SKIP_WITHOUT_GPU() \
  if (std::string why = ::troupe::testing::no_gpu_reason(); !why.empty()) GTEST_SKIP() << why

#define TROUPE_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

/// A device buffer of `count` T, freed with it.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    if (cudaMalloc(reinterpret_cast<void**>(&data_), std::max<std::size_t>(count, 1) * sizeof(T)) !=
        cudaSuccess)
      data_ = nullptr;
  }
  DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) { upload(values); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return data_; }
  void upload(const std::vector<T>& values) {
    cudaMemcpy(data_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();  // pageable copies may return early; kernels on other streams follow
  }
  std::vector<T> download() const {
    std::vector<T> out(count_);
    cudaMemcpy(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace troupe::testing
