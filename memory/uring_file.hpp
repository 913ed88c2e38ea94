#pragma once
// Writes one whole file through io_uring: the checkpoint writer's path to disk, the same kernel
// interface as the NVMe tier, but exact bytes (no page padding, no sidecar index) and its own small ring,
// so a checkpoint file is precisely the data the manifest's size and CRC32C describe.

#include <chrono>
#include <cstddef>
#include <string>

#include "base/result.hpp"

namespace troupe {

struct UringFileOptions {
  std::size_t chunk_bytes = std::size_t{8} << 20;  // one write request
  unsigned depth = 4;                              // requests in flight
  std::chrono::milliseconds timeout{120000};       // no completion for this long: the disk is lost
};

// Creates (or truncates) `path`, writes `bytes` from `data` and fsyncs it, all as io_uring requests.
// Errors name the path and the system's reason ("No space left on device").
Status write_file_uring(const std::string& path, const void* data, std::size_t bytes,
                        const UringFileOptions& options = {});

}  // namespace troupe
