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

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "transport/collective.hpp"
#include "transport/options.hpp"

namespace troupe {

/// Called once per operation, on the progress thread.
using Completion = std::function<void(Status)>;

/// A communicator: an ordered subset of the ranks with its own sequence of collectives.
/// Ranks inside a communicator are numbered by their position in its member list.
using CommunicatorId = uint64_t;
constexpr CommunicatorId world_communicator = 0;

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
  /// Payload bytes this rank has posted to peers so far (collectives and point to point;
  /// not the control frames): what a step moves is the difference across it. Shared so it
  /// may be read after the transport is gone.
  std::shared_ptr<const std::atomic<uint64_t>> bytes_sent() const;

  /// In-place all-reduce of `count` elements; `data` must stay valid until `done`.
  void all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, Completion done,
                  CommunicatorId comm = world_communicator);
  void all_reduce(float* data, std::size_t count, ReduceOp op, Completion done) {
    all_reduce(data, count, DataType::f32, op, std::move(done));
  }
  /// `input` holds world_size blocks of `count` elements; block r reduced over all ranks
  /// lands in `output` on rank r. `output` may alias this rank's own block of `input`.
  void reduce_scatter(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                      Completion done, CommunicatorId comm = world_communicator);
  /// Every rank's `count` elements of `input` land in block r of `output` (world_size
  /// blocks) on every rank. `input` may alias this rank's own block of `output`.
  void all_gather(const void* input, void* output, std::size_t count, DataType type, Completion done,
                  CommunicatorId comm = world_communicator);
  /// In-place broadcast of `count` elements from `root`.
  void broadcast(void* data, std::size_t count, DataType type, int64_t root, Completion done,
                 CommunicatorId comm = world_communicator);
  void broadcast(float* data, std::size_t count, int64_t root, Completion done) {
    broadcast(data, count, DataType::f32, root, std::move(done));
  }
  /// Point to point: sends complete in order per peer and match the peer's receives in order.
  void send(const void* data, std::size_t bytes, int64_t peer, Completion done);
  void recv(void* data, std::size_t bytes, int64_t peer, Completion done);
  /// Keyed point to point: a send matches the peer's receive of the same key (below
  /// point_to_point_keys) from this rank, whatever the order either side issued them in;
  /// each key in use by one message at a time per pair of ranks. Pipeline stages, several
  /// to a rank with virtual stages, key activations and gradients by what they are.
  void send_keyed(const void* data, std::size_t bytes, int64_t peer, uint64_t key, Completion done);
  void recv_keyed(void* data, std::size_t bytes, int64_t peer, uint64_t key, Completion done);
  /// Completes once every rank has entered the barrier.
  void barrier(Completion done, CommunicatorId comm = world_communicator);
  /// Creates a communicator of `members` (world ranks, in the order that numbers them).
  /// Collective over the world: every rank calls it, with the same list, in the same
  /// order relative to its other calls; a rank that is not a member gets the id but may
  /// not use it. Blocks for at most collective_timeout_s.
  Result<CommunicatorId> make_communicator(const std::vector<int64_t>& members);
  /// Whether world all-reduces run in two levels (hosts, then across hosts).
  bool two_level() const;
  /// This rank's position in `comm`, or -1 when it is not a member.
  int64_t position_in(CommunicatorId comm) const;
  /// How many ranks `comm` has, or 0 when no such communicator was made.
  int64_t size_of(CommunicatorId comm) const;

  /// Actor messages between ranks: small opaque frames (at most wire::message_bytes_max),
  /// in order per peer. The handler runs on the progress thread: keep it short.
  using MessageHandler = std::function<void(int64_t from, std::vector<uint8_t> bytes)>;
  void on_message(MessageHandler handler);
  void post_message(int64_t peer, std::vector<uint8_t> bytes, Completion done);

  /// Stops the job: tells every peer why, and fails every operation in flight.
  void abort(const std::string& reason);

  /// Blocking forms for callers outside the actor system (tests, benchmarks, shutdown).
  Status all_reduce_sync(void* data, std::size_t count, DataType type, ReduceOp op,
                         CommunicatorId comm = world_communicator);
  Status all_reduce_sync(float* data, std::size_t count, ReduceOp op) {
    return all_reduce_sync(data, count, DataType::f32, op);
  }
  Status reduce_scatter_sync(const void* input, void* output, std::size_t count, DataType type, ReduceOp op,
                             CommunicatorId comm = world_communicator);
  Status all_gather_sync(const void* input, void* output, std::size_t count, DataType type,
                         CommunicatorId comm = world_communicator);
  Status broadcast_sync(void* data, std::size_t count, DataType type, int64_t root,
                        CommunicatorId comm = world_communicator);
  Status broadcast_sync(float* data, std::size_t count, int64_t root) {
    return broadcast_sync(data, count, DataType::f32, root);
  }
  Status send_sync(const void* data, std::size_t bytes, int64_t peer);
  Status recv_sync(void* data, std::size_t bytes, int64_t peer);
  Status barrier_sync(CommunicatorId comm = world_communicator);

  class Impl;

 private:
  explicit Transport(std::unique_ptr<Impl> impl);
  double sync_timeout_s() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
