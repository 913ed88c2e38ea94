// Transport: the UCX data plane of one rank. It bootstraps the cluster, keeps an
// endpoint to every peer, and runs collectives on host fp32 buffers as state
// machines on its own progress thread, which sleeps on the worker's event fd
// when idle (no core burnt polling).
//
// Ownership: one per rank, owned by the comm agent. Thread safety: every public
// method may be called from any thread and returns at once; completions run on
// the progress thread and must be short and never block (post a message instead).
// Invariants: collectives are numbered in issue order, and every rank must issue
// the same collectives in the same order. Every collective ends, with success or an
// error, within collective_timeout_s; a lost or aborting peer fails them all.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/result.hpp"
#include "transport/collective.hpp"
#include "transport/options.hpp"

namespace troupe {

/// Called once per operation, on the progress thread.
using Completion = std::function<void(Status)>;

class Transport {
 public:
  /// Creates the UCX worker, joins the cluster and connects to every peer.
  /// Blocks the caller for at most options.bootstrap_timeout_s.
  static Result<std::unique_ptr<Transport>> make(const TransportOptions& options);
  /// Flushes what is in flight (bounded) and closes every endpoint.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int64_t rank() const;
  int64_t world_size() const;

  /// In-place all-reduce of `count` floats; `data` must stay valid until `done`.
  void all_reduce(float* data, std::size_t count, ReduceOp op, Completion done);
  /// In-place broadcast of `count` floats from `root`.
  void broadcast(float* data, std::size_t count, int64_t root, Completion done);
  /// Completes once every rank has entered the barrier.
  void barrier(Completion done);
  /// Stops the job: tells every peer why, and fails every operation in flight.
  void abort(const std::string& reason);

  /// Blocking forms for callers outside the actor system (tests, shutdown).
  Status all_reduce_sync(float* data, std::size_t count, ReduceOp op);
  Status broadcast_sync(float* data, std::size_t count, int64_t root);
  Status barrier_sync();

  class Impl;

 private:
  explicit Transport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
