// Messages of a checkpoint: what a stage, its shard owner and the offload manager hand
// over to be saved, and take back on resume. The engine asks between steps, when no
// update is in flight.
//
// A partition travels in shard coordinates: the store's shards (ParameterStore::shards())
// back to back, shard k's elements at the sum of the earlier shards' sizes. Array 0 holds
// the fp32 values the optimizer updates (the master copy under mixed precision); arrays
// 1.. hold the optimizer state (Adam's exp_avg then exp_avg_sq, SGD's momentum).
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/host_buffer.hpp"
#include "optim/loss_scaler.hpp"

namespace troupe {

struct PartitionState {
  std::vector<std::shared_ptr<HostBuffer>> arrays;  ///< fp32, each over the whole partition
  std::vector<int64_t> steps;                       ///< the optimizer's step count, by layout position
};

/// To a shard owner or offload manager: a copy of the partition; answered with state_snapshot.
struct snapshot_state {
  caf::actor reply_to;
};
struct state_snapshot {
  PartitionState state;
  std::string error;
};

/// To a shard owner or offload manager: take these values and this state (the arrays
/// shaped as a snapshot's); answered with state_restored.
struct restore_state {
  PartitionState state;
  caf::actor reply_to;
};
struct state_restored {
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_restored& x) {
  return f(caf::meta::type_name("state_restored"), x.error);
}

/// One run of a stage's parameter in the partition arrays: `count` elements of its
/// parameter `tensor` (its index among the stage's model parameters) from `offset`, at
/// element `at` of the arrays.
struct PartitionPiece {
  std::size_t tensor = 0;
  std::size_t offset = 0;
  std::size_t count = 0;
  std::size_t at = 0;
};

/// What a stage keeps and how its partition is laid out; answered to describe_stage.
struct stage_layout {
  std::vector<PartitionPiece> pieces;
  std::size_t partition_elements = 0;
  std::size_t arrays = 1;  ///< 1 + the optimizer's state arrays
  /// By tensor (stage order): its elements, and whether the stage keeps it whole (every
  /// tensor at ZeRO 0-2, those of the persistent rows at 3): a restore gives it those
  /// tensors' values too.
  std::vector<std::size_t> tensor_elements;
  std::vector<bool> held;
  std::string error;
};
struct describe_stage {};

/// A stage's training state between steps: its partition (steps by tensor, not by layout
/// position), its update count (where the learning-rate schedule is) and its loss scaler.
struct stage_snapshot {
  PartitionState state;
  int64_t updates_applied = 0;
  std::optional<LossScalerState> scaler;
  std::string error;
};
struct snapshot_stage {};

/// Resume: the partition (steps by tensor), the fp32 values of the tensors the stage holds
/// whole (stage_layout::held), back to back in stage order, the update count and the loss
/// scaler.
struct restore_stage {
  PartitionState state;
  std::shared_ptr<HostBuffer> model_values;
  int64_t updates_applied = 0;
  std::optional<LossScalerState> scaler;
};

}  // namespace troupe

// Buffer and actor handles: in-process only, never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::snapshot_state)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::state_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::restore_state)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::stage_layout)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::describe_stage)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::stage_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::snapshot_stage)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::restore_stage)
