// `troupe bench nvme`: the NVMe tier's sequential bandwidth, measured the way fio's
// peer script does (one file, O_DIRECT, io_uring, `block_size` requests, `queue_depth` in
// flight): write `bytes` from one aligned buffer through NvmeStore, then read them back,
// checksums included. Prints one line per direction —
//   bench=nvme rw=write bytes=N block=B qd=Q MBps=X direct=1 io=direct
// — or with --json one object per line with the same keys. MBps is 2^20 bytes per second,
// fio's unit. The file is removed afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace troupe {

struct NvmeBenchOptions {
  std::string dir;                        ///< where the file goes: a directory on the device to measure
  int64_t bytes = int64_t{1} << 30;       ///< moved each way, from one buffer of this size
  int64_t block_size = int64_t{1} << 20;  ///< bytes per request
  int64_t queue_depth = 32;               ///< requests in flight
  /// Measure buffered I/O (the page cache) on purpose. Without it the benchmark uses
  /// O_DIRECT or refuses, naming the directory and why: it never reports the page cache
  /// as the device.
  bool buffered = false;
  bool json = false;
};

/// Runs the benchmark and returns the exit code (errors go to stderr as one sentence).
int run_bench_nvme(const NvmeBenchOptions& options);

class NvmeStore;
/// Seconds to write (or read) `bytes` at `data` as key `key` through `store`, bounded.
Result<double> time_nvme_transfer(NvmeStore& store, bool write, const std::string& key, std::byte* data,
                                  int64_t bytes);

}  // namespace troupe
