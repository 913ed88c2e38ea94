// NvmeStore: the NVMe tier. Keys (file names the caller chooses, e.g. "opt-3.bin") hold
// byte blobs in files under one directory; a write or read of a key is split into
// block_size requests that io_uring runs queue_depth at a time, refilling the queue
// after each completion (DeepSpeed's aio with overlap_events, on io_uring instead of
// libaio). Files are opened O_DIRECT so reads come from the device, not the page
// cache; where the file system refuses O_DIRECT (tmpfs on older kernels, some FUSE)
// the store falls back to buffered I/O and says so in direct().
//
// Alignment: `data` must be 4 KiB aligned (an AlignedPool buffer is). `bytes` may be
// anything: whole pages go straight between the caller's memory and the device, and the
// last partial page goes through a 4 KiB bounce page of the store's own, zero-padded on
// disk — so the caller's buffer never needs room past `bytes`. Files hold whole pages.
//
// Checksums: a CRC32C per block of what the caller wrote, kept in memory and in a
// sidecar `<key>.index` (see nvme_index.hpp). A read checks every block, and the file's
// length, and fails with the path, the block's offset and the expected value.
//
// Completion: every write and read ends with exactly one call of its callback, on the
// store's completion thread, with the first error or success. Errors name the operation,
// the byte count, the offset and the path ("writing 1048576 bytes at offset 4194304 of
// /x/rank0/opt-3.bin failed: No space left on device"). Nothing waits without a deadline:
// if the device completes nothing for io_timeout while requests are in flight, every
// operation fails and the store refuses further work (treat it as fatal: the kernel may
// still touch the buffers of the requests it never completed).
//
// Thread safety: write() and read() may be called from any thread, including from a
// callback. Callbacks run one at a time on the completion thread and must not block on
// the store or destroy it. The caller must not start a write of a key while another write or read of
// that key is unfinished, and must keep `data` valid until the callback.
// The destructor finishes everything submitted before it, then stops the thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/result.hpp"
#include "base/trace.hpp"
#include "memory/direct_io.hpp"
#include "memory/memory_ledger.hpp"

namespace troupe {

/// Called once when a write or read has finished, with its outcome.
using IoCallback = std::function<void(Status)>;

struct NvmeStoreOptions {
  /// Bytes per request and per checksum: DeepSpeed's aio block_size. A multiple of 4 KiB.
  std::size_t block_size = std::size_t{1} << 20;
  /// Requests in flight: DeepSpeed's aio queue_depth.
  unsigned queue_depth = 8;
  DirectIo direct_io = DirectIo::prefer;
  /// The longest the store waits for the device to complete anything while requests are in flight.
  std::chrono::milliseconds io_timeout{60000};
  /// Optional: charged for the store's bounce pages (queue_depth × 4 KiB, communication).
  std::shared_ptr<MemoryLedger> ledger;
  /// Optional, must outlive the store: each write and read that succeeds is recorded on the
  /// "nvme" track ("write KEY", "read KEY") from its first block's completion to its last,
  /// so the span is time the device was moving its bytes, not time it waited to be issued.
  Tracer* tracer = nullptr;
};

/// Makes directory `dir` (its parent must exist); an existing one is fine. The error names
/// the directory and the reason (a missing parent, a file in the way, no permission).
Status make_directory(const std::string& dir);

class NvmeStore {
 public:
  static constexpr std::size_t alignment = 4096;
  static constexpr unsigned max_queue_depth = 1024;
  static constexpr std::size_t max_block_size = std::size_t{1} << 30;

  /// Opens the tier in `dir`, which must exist and be writable (a probe file is created
  /// and removed); starts io_uring and the completion thread. Fails with a sentence
  /// naming the directory and the reason.
  static Result<std::unique_ptr<NvmeStore>> open(const std::string& dir, NvmeStoreOptions options = {});
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  /// Writes `bytes` at `data` as the whole content of `key` (replacing what it held).
  void write(const std::string& key, const void* data, std::size_t bytes, IoCallback done);
  /// Reads the whole content of `key`, which must be exactly `bytes`, into `data`, checking every block.
  void read(const std::string& key, void* data, std::size_t bytes, IoCallback done);

  /// False where I/O goes through the page cache: the file system refused O_DIRECT, or
  /// direct_io was never.
  bool direct() const;
  /// Why I/O is buffered, naming the directory ("" when it is direct).
  const std::string& buffered_reason() const;
  const std::string& dir() const;
  const NvmeStoreOptions& options() const;
  /// The data file of `key`; its checksums are in index_path(path_of(key)).
  std::string path_of(const std::string& key) const;

  class Engine;  // the completion thread and its ring (nvme_store.cpp)

 private:
  NvmeStore(std::unique_ptr<Engine> engine, std::string buffered_reason);
  std::unique_ptr<Engine> engine_;
  std::string buffered_reason_;
};

}  // namespace troupe
