// Collective algorithms as state machines over tagged point-to-point transfers.
//
// A Collective posts sends and receives through TransferIo and advances when the
// transport reports that one of them finished. It never blocks and never touches
// UCX, so the same state machines run over UCX (transport.cpp) and over an
// in-process fake in unit tests.
// Thread safety: a Collective belongs to the thread that progresses its transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace troupe {

enum class ReduceOp { sum, average };

/// The transfers a collective asks its transport to carry.
class TransferIo {
 public:
  virtual ~TransferIo() = default;
  /// Sends `bytes` from `data` to `peer`; on completion the transport calls
  /// on_transfer(chunk) of operation `op`. `data` must stay untouched until then.
  virtual void post_send(int64_t peer, const void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                         uint64_t chunk) = 0;
  /// Receives exactly `bytes` from `peer` into `data`; completes like post_send.
  virtual void post_recv(int64_t peer, void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                         uint64_t chunk) = 0;
};

/// The UCX tag of one transfer: operation, chunk, ring step and sending rank.
uint64_t transfer_tag(uint64_t op, uint64_t chunk, int64_t step, int64_t sender);
/// Chunks are numbered in 20 bits of the tag.
constexpr uint64_t chunks_max = uint64_t{1} << 20;

class Collective {
 public:
  virtual ~Collective() = default;
  /// Posts the first transfers (or finishes at once when there is nothing to move).
  virtual void start(TransferIo& io) = 0;
  /// One transfer of `chunk` finished successfully.
  virtual void on_transfer(TransferIo& io, uint64_t chunk) = 0;
  virtual bool done() const = 0;
  /// For messages: e.g. "all_reduce #12 of 4096 bytes".
  virtual std::string describe() const = 0;
};

struct CollectiveShape {
  uint64_t id = 0;  ///< sequence number; equal on every rank for the same call
  int64_t rank = 0;
  int64_t world_size = 1;
  std::size_t chunk_bytes = 256 << 10;
  std::size_t chunks_in_flight = 8;
};

/// Ring all-reduce (reduce-scatter, then all-gather) of `count` floats in place.
std::unique_ptr<Collective> make_all_reduce(const CollectiveShape& shape, float* data, std::size_t count,
                                            ReduceOp op);
/// Pipelined chain broadcast of `count` floats from `root` in place.
std::unique_ptr<Collective> make_broadcast(const CollectiveShape& shape, float* data, std::size_t count,
                                           int64_t root);

}  // namespace troupe
