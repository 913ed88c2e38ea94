// Collective algorithms as state machines over tagged point-to-point transfers.
//
// A Collective posts sends and receives through TransferIo and advances when the
// transport reports that one of them finished. It never blocks and never touches
// UCX, so the same state machines run over UCX (transport.cpp) and over an
// in-process fake network in unit tests. Ranks here are positions in the
// communicator the collective runs on; the transport maps them to processes.
// Thread safety: a Collective belongs to the thread that progresses its transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/reduce.hpp"

namespace troupe {

enum class ReduceOp : uint8_t { sum, average };

/// The transfers a collective asks its transport to carry.
class TransferIo {
 public:
  virtual ~TransferIo() = default;
  /// Sends `bytes` from `data` to `peer`; on completion the transport calls
  /// on_transfer(chunk) of operation `op`. `data` must stay untouched until then.
  virtual void post_send(int64_t peer, const void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                         uint64_t chunk) = 0;
  /// Receives exactly `bytes` from `peer` into `data`; completes like post_send. A
  /// message whose tag differs only in the descriptor bits (another collective issued
  /// in this one's place) or whose size differs is an error, not a match.
  virtual void post_recv(int64_t peer, void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                         uint64_t chunk) = 0;
};

/// Field widths of a transfer tag (64 bits, most significant first):
/// point-to-point flag 1 | communicator 5 | descriptor 6 | operation 12 | chunk 19 | step 11 | sender 10.
namespace tag_bits {
constexpr int sender = 10, step = 11, chunk = 19, op = 12, descriptor = 6, communicator = 5;
constexpr int step_shift = sender, chunk_shift = step_shift + step, op_shift = chunk_shift + chunk;
constexpr int descriptor_shift = op_shift + op, communicator_shift = descriptor_shift + descriptor;
constexpr int point_to_point_shift = communicator_shift + communicator;
static_assert(point_to_point_shift == 63, "tag fields fill 64 bits");
constexpr uint64_t descriptor_mask = ((uint64_t{1} << descriptor) - 1) << descriptor_shift;
/// The bits that name one operation of one communicator (whatever its chunks and steps).
constexpr uint64_t operation_mask =
    ((((uint64_t{1} << (communicator + descriptor + op)) - 1) << op_shift) & ~descriptor_mask) |
    (uint64_t{1} << point_to_point_shift);
}  // namespace tag_bits

constexpr int64_t world_size_max = int64_t{1} << tag_bits::sender;  ///< ranks per communicator
constexpr uint64_t chunks_max = uint64_t{1} << tag_bits::chunk;
constexpr uint64_t communicators_max = uint64_t{1} << tag_bits::communicator;

/// Everything that identifies one collective on one rank.
struct CollectiveShape {
  uint64_t id = 0;   ///< sequence number on its communicator; equal on every rank
  uint64_t key = 0;  ///< the transport's handle for completions, unique across communicators
  uint64_t communicator = 0;
  uint64_t descriptor = 0;  ///< hash of kind, type, size and root: equal only for the same call
  int64_t rank = 0;         ///< position in the communicator
  int64_t world_size = 1;   ///< size of the communicator
  std::size_t chunk_bytes = 256 << 10;
  std::size_t chunks_in_flight = 8;
};

/// The UCX tag of one transfer of a collective.
uint64_t transfer_tag(const CollectiveShape& shape, uint64_t chunk, int64_t step, int64_t sender);

/// The tag of the `sequence`-th point-to-point message from `sender` to one peer.
uint64_t point_to_point_tag(uint64_t sequence, int64_t sender);

/// Keys of keyed point-to-point messages: below 2^40.
constexpr uint64_t point_to_point_keys = uint64_t{1} << 40;
/// The tag of the point-to-point message from `sender` keyed `key` (< point_to_point_keys):
/// apart from every sequenced one (point_to_point_tag) by a bit of its own.
uint64_t point_to_point_key_tag(uint64_t key, int64_t sender);

/// A 6-bit digest of what a call is, so ranks that issue different calls under the
/// same sequence number are told apart.
uint64_t describe_call(const char* kind, DataType type, std::size_t count, int64_t root, ReduceOp op);

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

/// Ring all-reduce (reduce-scatter, then all-gather) of `count` elements in place.
std::unique_ptr<Collective> make_all_reduce(const CollectiveShape& shape, void* data, std::size_t count,
                                            DataType type, ReduceOp op);
/// Recursive-doubling all-reduce in place: log2(n) exchanges of the whole buffer (plus
/// two for ranks beyond the largest power of two), for buffers small enough that the
/// number of steps, not bandwidth, decides the time. Every rank ends with identical bits.
std::unique_ptr<Collective> make_all_reduce_small(const CollectiveShape& shape, void* data, std::size_t count,
                                                  DataType type, ReduceOp op);
/// Below this size all-reduce uses recursive doubling, above it the ring.
constexpr std::size_t small_all_reduce_bytes = 64 << 10;

/// Ring reduce-scatter: `input` holds world_size blocks of `count` elements; block r,
/// reduced over all ranks, lands in `output` of rank r. `input` is left unchanged unless
/// `output` aliases this rank's own block (the in-place form).
std::unique_ptr<Collective> make_reduce_scatter(const CollectiveShape& shape, const void* input, void* output,
                                                std::size_t count, DataType type, ReduceOp op);
/// Ring all-gather in place: `data` holds world_size blocks of `count` elements, this
/// rank's in block r; afterwards every block holds its owner's data on every rank.
std::unique_ptr<Collective> make_all_gather(const CollectiveShape& shape, void* data, std::size_t count,
                                            DataType type);
/// Balanced-segment forms, for buffers that do not divide evenly: `total` elements cut
/// as ring::segment does. Reduce-scatter in place leaves segment r reduced on rank r;
/// all-gather in place spreads segment r of rank r to every rank.
std::unique_ptr<Collective> make_reduce_scatter_segments(const CollectiveShape& shape, void* data,
                                                         std::size_t total, DataType type, ReduceOp op);
std::unique_ptr<Collective> make_all_gather_segments(const CollectiveShape& shape, void* data,
                                                     std::size_t total, DataType type);
/// Pipelined chain broadcast of `bytes` from `root` in place.
std::unique_ptr<Collective> make_broadcast(const CollectiveShape& shape, void* data, std::size_t bytes,
                                           int64_t root);

/// One point-to-point send or receive of `bytes`, tagged with the pair's sequence number.
std::unique_ptr<Collective> make_send(uint64_t id, int64_t peer, const void* data, std::size_t bytes,
                                      uint64_t tag);
std::unique_ptr<Collective> make_recv(uint64_t id, int64_t peer, void* data, std::size_t bytes, uint64_t tag);

/// Convenience for fp32 callers.
inline std::unique_ptr<Collective> make_all_reduce(const CollectiveShape& shape, float* data,
                                                   std::size_t count, ReduceOp op) {
  return make_all_reduce(shape, data, count, DataType::f32, op);
}

}  // namespace troupe
