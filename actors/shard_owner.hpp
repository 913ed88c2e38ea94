// The shard owner actor: one data-parallel partition of a stage's training state —
// this rank's blocks of the parameters (the fp32 master values), their gradients
// and the optimizer state for them, which no other rank holds (ZeRO stages 1-3; in
// stage 0 the partition is the whole model). Its work runs on a stream of its own:
// absorbing reduced gradient blocks, measuring the gradients' norm, clipping and
// stepping the optimizer. Measures the optimizer state it allocates into the ledger.
// The state and the update live with an offload manager actor it spawns
// (actors/offload_manager.hpp): in memory by default, or in the tier [offload] optimizer
// names. Only a trainer's own LibTorch optimizer factory runs here, on this stream.
//
// Protocol (actors/protocol/zero.hpp): begin_accumulation; absorb_gradients →
// gradients_absorbed; measure_gradients → gradient_square_sum; update_shard →
// shard_updated; a failure → stage_failed to the requester. snapshot_state and
// restore_state (actors/protocol/checkpoint.hpp) go to the offload manager, which holds the
// state; without one (a trainer's own optimizer, a GPU rank) they are refused.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <memory>
#include <optional>

#include "actors/device_rank.hpp"
#include "actors/micro_batch.hpp"
#include "actors/offload_manager.hpp"
#include "actors/zero/parameter_store.hpp"
#include "base/trace.hpp"

namespace troupe {

struct ShardOwnerOptions {
  std::shared_ptr<ParameterStore> store;
  OptimizerFactory make_optimizer;
  int64_t threads = 1;  ///< intra-op threads of the owner's stream
  Tracer* tracer = nullptr;
  caf::actor report_to;  ///< hears stage_failed when the owner's work throws
  /// With an offload tier the optimizer state lives with an offload manager, which runs
  /// troupe's fused kernels with `rule`; without, LibTorch's optimizer from make_optimizer.
  std::optional<OffloadOptions> offload;
  OptimizerRule rule;
  /// A GPU rank: the partition is in device memory and the owner issues on the rank's
  /// compute stream. Without an offload tier, Adam and AdamW run as troupe's fused CUDA
  /// kernel there (SGD and a trainer's factory as LibTorch's optimizer on the device);
  /// with one, the gradients go to host memory, the tier updates the host's fp32 master
  /// copy, and the parameters come back (ZeRO-Offload).
  std::optional<DeviceRank> device;
  /// By shard (ParameterStore::shards()), or empty: shards the gradient norm leaves out
  /// (a pipeline stage's copy of a weight another stage owns and counts).
  std::vector<bool> outside_norm;
};

caf::actor spawn_shard_owner(caf::actor_system& system, ShardOwnerOptions options);

}  // namespace troupe
