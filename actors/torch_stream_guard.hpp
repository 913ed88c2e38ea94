// TorchStreamGuard: while it lives, the LibTorch CUDA work of the calling thread goes to a
// CudaStream — the stage's forward and backward run on the rank's compute stream, not on
// LibTorch's default one (an external-stream guard: c10::cuda::getStreamFromExternal).
// Built only when the LibTorch found has CUDA (TROUPE_TORCH_CUDA), as PyTorch's wheel has.
// Thread safety: a guard belongs to the thread that made it (LibTorch's current stream is
// per thread), like any scope guard.
#pragma once

#include <memory>

#include "actors/cuda_stream.hpp"

namespace troupe {

class TorchStreamGuard {
 public:
  explicit TorchStreamGuard(const CudaStream& stream);
  ~TorchStreamGuard();
  TorchStreamGuard(const TorchStreamGuard&) = delete;
  TorchStreamGuard& operator=(const TorchStreamGuard&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
