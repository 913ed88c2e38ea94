#include "memory/cuda/pinned.hpp"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

namespace troupe {

Result<std::unique_ptr<PinnedPool>> PinnedPool::make(AlignedPoolOptions options) {
  std::string name = options.name;
  auto pool = AlignedPool::make(std::move(options));
  if (!pool) return pool.error();
  std::size_t bytes = (*pool)->buffer_bytes() * (*pool)->count();
  if (cudaError_t e = cudaHostRegister((*pool)->slab(), bytes, cudaHostRegisterDefault); e != cudaSuccess)
    return make_error(
        fmt::format("{}: pinning {} bytes of host memory failed: {}", name, bytes, cudaGetErrorString(e)));
  return std::unique_ptr<PinnedPool>(new PinnedPool(std::move(*pool)));
}

Result<std::shared_ptr<void>> pin_host(void* data, std::size_t bytes) {
  if (bytes == 0) return std::shared_ptr<void>();
  if (cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterDefault); e != cudaSuccess)
    return make_error(
        fmt::format("pinning {} bytes of host memory failed: {}", bytes, cudaGetErrorString(e)));
  return std::shared_ptr<void>(data, [](void* pinned) { cudaHostUnregister(pinned); });
}

PinnedPool::~PinnedPool() {
  cudaHostUnregister(pool_->slab());
}

}  // namespace troupe
