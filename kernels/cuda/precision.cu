#include "kernels/cuda/precision.cuh"

#include <cstdint>

#include "kernels/cuda/rounding.cuh"

namespace troupe::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

int blocks_for(std::size_t n) {
  std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

__global__ void narrow_kernel(const float* x, uint16_t* out, std::size_t n, bool bf16) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = bf16 ? narrow_bf16(x[i]) : to_f16_bits(x[i]);
}

__global__ void widen_kernel(const uint16_t* x, float* out, std::size_t n, bool bf16) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = bf16 ? widen_bf16(x[i]) : from_f16_bits(x[i]);
}

__global__ void nonfinite_kernel(const float* x, std::size_t n, int* flag) {
  bool found = false;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    found |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
}

// Each block sums its grid-stride share in fp64 and reduces it in shared memory in a fixed
// tree, so the partials (and the final sum of them) do not depend on timing.
__global__ void partial_squares_kernel(const float* x, std::size_t n, double* partials) {
  __shared__ double sums[kThreads];
  double sum = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    double v = x[i];
    sum += v * v;
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void total_kernel(const double* partials, int count, double* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += partials[i];
  *out = sum;
}

}  // namespace

cudaError_t cast_from_f32(const float* x, void* out, std::size_t n, DataType to, cudaStream_t stream) {
  if (to == DataType::f32)
    return cudaMemcpyAsync(out, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
  narrow_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<uint16_t*>(out), n,
                                                        to == DataType::bf16);
  return cudaGetLastError();
}

cudaError_t cast_to_f32(const void* x, DataType from, float* out, std::size_t n, cudaStream_t stream) {
  if (from == DataType::f32)
    return cudaMemcpyAsync(out, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
  widen_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const uint16_t*>(x), out, n,
                                                       from == DataType::bf16);
  return cudaGetLastError();
}

cudaError_t flag_nonfinite(const float* x, std::size_t n, int* flag, cudaStream_t stream) {
  nonfinite_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, flag);
  return cudaGetLastError();
}

std::size_t sum_squares_workspace(std::size_t n) {
  return static_cast<std::size_t>(blocks_for(n));
}

cudaError_t sum_squares(const float* x, std::size_t n, double* workspace, double* out, cudaStream_t stream) {
  int blocks = blocks_for(n);
  partial_squares_kernel<<<blocks, kThreads, 0, stream>>>(x, n, workspace);
  total_kernel<<<1, 1, 0, stream>>>(workspace, blocks, out);
  return cudaGetLastError();
}

}  // namespace troupe::kernels::cuda
