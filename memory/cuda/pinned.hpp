// Pinned host memory for a GPU rank: the host tier and the staging buffers of copies and
// of collectives NCCL cannot do. An AlignedPool's slab is page-locked in place
// (cudaHostRegister), so the pool keeps its bounded acquire/release and its ledger
// charge, and H2D/D2H copies from its buffers run asynchronously at full PCIe/NVLink rate.
// Copies go on a CudaStream (CudaStream::copy); their completion is its next recorded Event.
// Thread safety: as AlignedPool; the registration lives as long as the PinnedPool.
#pragma once

#include <memory>

#include "base/result.hpp"
#include "memory/aligned_pool.hpp"

namespace troupe {

class PinnedPool {
 public:
  /// Allocates the pool and pins its slab; the error names the pool and the CUDA reason.
  static Result<std::unique_ptr<PinnedPool>> make(AlignedPoolOptions options);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  AlignedPool& pool() { return *pool_; }

 private:
  explicit PinnedPool(std::unique_ptr<AlignedPool> pool) : pool_(std::move(pool)) {}
  std::unique_ptr<AlignedPool> pool_;
};

/// Page-locks `bytes` of host memory at `data` in place, until the handle is dropped (which
/// must happen before the memory is freed); the error names what was asked and why not.
Result<std::shared_ptr<void>> pin_host(void* data, std::size_t bytes);

}  // namespace troupe
