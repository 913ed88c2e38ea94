#include "actors/torch_stream_guard.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace troupe {

struct TorchStreamGuard::Impl {
  c10::cuda::CUDAStreamGuard guard;
  explicit Impl(const CudaStream& s)
      : guard(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(s.native()),
                                               static_cast<c10::DeviceIndex>(s.device()))) {}
};

TorchStreamGuard::TorchStreamGuard(const CudaStream& stream) : impl_(std::make_unique<Impl>(stream)) {}
TorchStreamGuard::~TorchStreamGuard() = default;

}  // namespace troupe
