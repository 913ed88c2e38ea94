// The shard owner actor: one data-parallel partition of a stage's training state —
// this rank's blocks of the parameters (the fp32 master values), their gradients
// and the optimizer state for them, which no other rank holds (ZeRO stages 1-3; in
// stage 0 the partition is the whole model). Its work runs on a stream of its own:
// absorbing reduced gradient blocks, measuring the gradients' norm, clipping and
// stepping the optimizer. Measures the optimizer state it allocates into the ledger.
//
// Protocol (actors/protocol/zero.hpp): begin_accumulation; absorb_gradients →
// gradients_absorbed; measure_gradients → gradient_square_sum; update_shard →
// shard_updated; a failure → stage_failed to the requester.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <memory>

#include "actors/micro_batch.hpp"
#include "actors/zero/parameter_store.hpp"
#include "base/trace.hpp"

namespace troupe {

struct ShardOwnerOptions {
  std::shared_ptr<ParameterStore> store;
  OptimizerFactory make_optimizer;
  int64_t threads = 1;  ///< intra-op threads of the owner's stream
  Tracer* tracer = nullptr;
  caf::actor report_to;  ///< hears stage_failed when the owner's work throws
};

caf::actor spawn_shard_owner(caf::actor_system& system, ShardOwnerOptions options);

}  // namespace troupe
