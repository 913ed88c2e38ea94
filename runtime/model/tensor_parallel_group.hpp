// A tensor-parallel group as the layers of one rank see it: how many ranks share each
// layer, which of them this rank is, and the collectives that join their pieces inside
// forward and backward (Megatron-LM's f/g operators and their sequence-parallel forms).
//
// The group is made before the model (the layers need its size and position to take their
// shard) and bound to the transport by the engine once the cluster is up; a layer that
// runs before then fails saying so. The layers also register how each of their
// parameters is split, so the engine can count a replicated parameter once in the
// gradient norm, check that every rank kept it equal, and put a whole tensor back together
// from its shards.
//
// A rank whose chunks (virtual pipeline stages) compute on threads of their own gives each
// chunk's thread a communicator of its own (use_on_this_thread), so two chunks' collectives
// never interleave on one; a layer's backward runs its collectives on the communicator its
// forward used (OnThread), whichever thread autograd runs it on.
//
// Thread safety: the collectives are called from compute streams (they block that
// thread, never an actor's); describe() and split_of() from the thread that builds the
// model and then the engine's, never at once; use_on_this_thread() from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/result.hpp"

namespace troupe {

/// How one parameter is laid out across a tensor-parallel group. A split parameter's
/// dimension `dim` is made of `blocks` equal blocks (a fused q/k/v projection has three),
/// and rank t holds the t-th of tp equal slices of every block, in block order.
struct TensorSplit {
  bool replicated = true;
  int64_t dim = 0;
  int64_t blocks = 1;
};

/// The collectives a tensor-parallel layer needs, on fp32 host buffers, summed. Every call
/// is bounded by the cluster's collective timeout and fails naming the group.
class TensorParallelComm {
 public:
  virtual ~TensorParallelComm() = default;
  /// In place: every rank's `count` elements summed on every rank.
  virtual Status all_reduce(float* data, std::size_t count) = 0;
  /// Every rank's `count` elements of `input`, in rank order, into `output` (tp × count).
  virtual Status all_gather(const float* input, float* output, std::size_t count) = 0;
  /// `input` holds tp blocks of `count`; block t summed over the group lands in rank t's `output`.
  virtual Status reduce_scatter(const float* input, float* output, std::size_t count) = 0;
  /// Starts an in-place sum and returns at once; the returned function waits for it.
  virtual std::function<Status()> start_all_reduce(float* data, std::size_t count) = 0;
  /// ... and the same for a reduce-scatter.
  virtual std::function<Status()> start_reduce_scatter(const float* input, float* output,
                                                       std::size_t count) = 0;
};

class TensorParallelGroup {
 public:
  TensorParallelGroup(int64_t size, int64_t index, bool sequence_parallel);

  int64_t size() const { return size_; }
  int64_t index() const { return index_; }
  /// [parallel] sequence_parallel: the layers take and give activations sharded along the
  /// sequence (dimension 1 of [batch, sequence, width]).
  bool sequence_parallel() const { return sequence_parallel_; }

  /// The engine's: the collectives this group's layers run from now on.
  void bind(std::shared_ptr<TensorParallelComm> comm) { comm_ = std::move(comm); }
  bool bound() const { return static_cast<bool>(comm_); }
  /// The collectives of this thread's work: use_on_this_thread()'s, else bind()'s; throws
  /// (an error a layer's caller reports) when there are none.
  TensorParallelComm& comm() const;
  /// comm(), or null where it would throw.
  TensorParallelComm* current_comm() const;
  /// The engine's: work on the calling thread uses `comm` from now on (the group keeps it).
  void use_on_this_thread(std::shared_ptr<TensorParallelComm> comm);

  /// Within its scope the calling thread's collectives of `group` go to `comm` (null:
  /// as before it).
  class OnThread {
   public:
    OnThread(const TensorParallelGroup* group, TensorParallelComm* comm);
    ~OnThread();
    OnThread(const OnThread&) = delete;
    OnThread& operator=(const OnThread&) = delete;

   private:
    const TensorParallelGroup* group_;
    TensorParallelComm* comm_;
  };

  /// A layer says how its parameter (by its TensorImpl, which ZeRO's swaps keep) is split.
  void describe(const void* parameter, TensorSplit split) { splits_[parameter] = split; }
  /// How `parameter` is split: replicated unless a layer described it.
  TensorSplit split_of(const void* parameter) const;

 private:
  int64_t size_;
  int64_t index_;
  bool sequence_parallel_;
  std::shared_ptr<TensorParallelComm> comm_;
  std::mutex lanes_mutex_;
  std::vector<std::shared_ptr<TensorParallelComm>> lanes_;  // use_on_this_thread()'s, kept alive
  std::unordered_map<const void*, TensorSplit> splits_;
};

}  // namespace troupe
