// NcclGroup: NCCL for the device buffers of a GPU rank, bootstrapped over troupe's own
// transport: rank 0 makes the unique id, the transport broadcasts its 128 bytes, and
// every rank joins with a non-blocking init polled against a deadline, so a rank that
// never comes is an error naming the wait instead of a hang.
//
// The operations launch on the stream they are given (the rank's comm stream) and return
// at once; their completion is that stream's next recorded event. NCCL is not thread-safe
// per communicator and needs the same order on every rank: the comm agent is the one
// caller, issuing in the order the stage's IssueQueue produced.
// A lost peer leaves NCCL kernels spinning on the GPU: abort() (the watchdog's way out)
// makes them return, and the group refuses further work.
//
// Thread safety: one caller at a time (the comm agent); abort() from any thread: it marks
// the group aborted first (an operation still settling gives up), then waits for it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>

#include "base/result.hpp"
#include "kernels/cpu/reduce.hpp"
#include "transport/transport.hpp"

namespace troupe {

class NcclGroup {
 public:
  /// Collective over `comm` of `transport` (the world, or a group the transport made):
  /// every member calls it with its own GPU `device`; the group's ranks are the
  /// communicator's positions.
  static Result<std::unique_ptr<NcclGroup>> create(Transport& transport, int device,
                                                   std::chrono::milliseconds timeout,
                                                   CommunicatorId comm = world_communicator);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// In place over `count` elements. `stream` is a cudaStream_t.
  Status all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, void* stream);
  /// `input` holds size() blocks of `count`; block rank() reduced lands in `output`.
  Status reduce_scatter(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                        void* stream);
  /// Every rank's `count` elements of `input` land in block r of `output`.
  Status all_gather(const void* input, void* output, std::size_t count, DataType type, void* stream);
  Status broadcast(void* data, std::size_t count, DataType type, int root, void* stream);

  /// Stops every operation in flight (a lost peer, a timeout); later calls fail.
  void abort();

 private:
  NcclGroup(void* comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  Status check(int result, const char* what);

  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1, device_ = 0;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;  // an operation in progress, or abort: never both (abort frees the communicator)
};

}  // namespace troupe
