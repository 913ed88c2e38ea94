// The stage actor: owns one pipeline stage of the model (a run of its layers; all of them
// when pp = 1), its compute stream, and — through ZeRO, over the stage's data-parallel
// group — where its parameters, gradients and optimizer state live. It never runs LibTorch
// on a CAF thread: forward, backward and gathers run on the compute stream; the optimizer
// runs in the shard owner actor; completions come back as messages.
//
// It runs the actions its scheduler hands it (protocol/pipeline.hpp), in order, each once
// what it needs has arrived: load a micro-batch; forward (the last stage adds the loss);
// backward; send and receive activations and their gradients to and from the neighbouring
// stages' ranks, through the comm agent's point-to-point transfers; reduce_gradients;
// optimizer_step. Gradient rows go to the comm agent as backward makes them final
// (all-reduce in stage 0, reduce-scatter in 1-3, the reduced blocks absorbed by the shard
// owner in 2-3). Stage 3 gathers each layer's parameters before it runs, in forward and in
// backward, prefetching along the order recorded on the first pass. Once every row is
// reduced: the mean loss, the global gradient norm (over every stage: clipping), which
// answer reduce_gradients; optimizer_step is the shard owner's update and, in stages 1-2,
// an all-gather of the updated rows.
//
// On a GPU rank (StageOptions::device) the model lives in device memory, forward and
// backward are issued on the rank's compute stream, the gradient rows are all-reduced by
// the device collectives actor as soon as the kernels that made them have run, and the
// shard owner steps on the same stream (or through host memory, with [offload]).
//
// Protocol: stage_action → action_done (gradients_ready for reduce_gradients,
// step_applied for optimizer_step); collect_parameters → parameters_collected; between
// steps, describe_stage → stage_layout, snapshot_stage → stage_snapshot and restore_stage →
// state_restored (actors/protocol/checkpoint.hpp); any failure → stage_failed. Replies go
// to the actor that sent the actions.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/device_rank.hpp"
#include "actors/micro_batch.hpp"
#include "actors/offload_manager.hpp"
#include "actors/stream.hpp"
#include "base/trace.hpp"
#include "memory/fetch_planner.hpp"
#include "memory/memory_ledger.hpp"
#include "memory/zero_policy.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/lr_schedule.hpp"
#include "transport/transport.hpp"

namespace troupe {

/// ZeRO's settings, as the [zero] section and [optimizer] gradient_clipping give them.
struct ZeroOptions {
  ZeroPolicy policy;                     ///< what the ZeRO stage partitions: decided once, for the job
  int64_t reduce_bucket_size = 6553600;  ///< elements
  bool overlap_comm = true;
  FetchPlanner::Limits limits;
  int64_t persistence_threshold = 100000;
  double gradient_clipping = 0;  ///< 0 = off
};

/// Where a stage sits: its index among `stages`, its neighbours' world ranks, and the
/// communicator of its data-parallel group (StageOptions::dp ranks, this one at
/// StageOptions::rank).
struct StagePlace {
  int64_t stage = 0;
  int64_t stages = 1;
  int64_t previous = -1;  ///< world rank of the stage before, or -1
  int64_t next = -1;      ///< world rank of the stage after, or -1
  int64_t world_rank = 0;
  int64_t world_size = 1;
  CommunicatorId group = world_communicator;
};

/// A weight this stage shares with other pipeline stages (DeepSpeed's TiedLayerSpec):
/// each step, once the stage's data-parallel group has reduced its gradients, the
/// stages sum their reduced blocks of it (each has it in a row of its own, so the blocks
/// are the same elements), and every copy takes the same update.
struct TiedWeight {
  std::size_t parameter = 0;                 ///< index among the stage's parameters (model_parameters order)
  CommunicatorId comm = world_communicator;  ///< this replica of every stage that uses it
  bool owner = false;  ///< the first of those stages: the one whose copy counts in the norm
};

/// Tensor parallelism: this stage's layers are shards over a group of `size` ranks, this
/// one at `shard`. A parameter marked `replicated` (model_parameters order) is held whole,
/// with the same gradient, by every rank of the group: it gets a ZeRO row of its own, and
/// only shard 0 counts it in the gradient norm. The squared norm is summed over
/// `norm_group`: the tensor-parallel group at ZeRO stage 0 (every replica holds every
/// reduced gradient), every rank of the stage at 1-3.
struct TensorParallelPlace {
  int64_t size = 1;
  int64_t shard = 0;
  std::vector<bool> replicated;
  CommunicatorId norm_group = world_communicator;
};

struct StageOptions {
  torch::nn::Sequential model;
  LossFunction loss;
  OptimizerFactory make_optimizer;
  LayerSchedule schedule;  ///< optional: which layers run, per micro-batch
  bool activation_checkpointing = false;  ///< forward keeps the input only; backward recomputes
  /// The program splits backwards into input and weight halves (actors/deferred_weights.hpp):
  /// gradient rows are posted as weight halves end, not as backward makes them.
  bool split_backward = false;
  std::vector<TiedWeight> ties;
  TensorParallelPlace tensor_parallel;
  ZeroOptions zero;
  StagePlace place;
  int64_t dp = 1;
  int64_t rank = 0;             ///< position in the data-parallel group (the replica)
  int64_t compute_threads = 1;  ///< intra-op threads of the compute stream (OpenMP, per thread)
  /// Set: the compute stream, shared with the rank's other chunks (virtual stages: one
  /// rank's chunks compute one at a time, as on one device); else the stage makes its own.
  std::shared_ptr<Stream> compute;
  /// Set: the first work on the compute stream's thread (what a trainer's layers need of
  /// the thread that runs them; the engine's: which communicator a chunk's tensor-parallel
  /// layers use when the chunk computes on a thread of its own).
  std::function<void()> on_compute_thread;
  double collective_timeout_s = 120;
  caf::actor comm_agent;
  Tracer* tracer = nullptr;
  std::shared_ptr<MemoryLedger> ledger;
  std::optional<OffloadOptions> offload;  ///< set: the optimizer state goes to an offload tier
  OptimizerRule rule;                     ///< the optimizer, for the offload tier's kernels
  /// The learning-rate schedule each update follows (unset: the optimizer's constant rate).
  std::shared_ptr<const LrSchedule> lr_schedule;
  std::optional<DeviceRank> device;       ///< set: a GPU rank (ZeRO stage 0; model already on it)
  /// What the model computes in ([precision] dtype). 16 bits: the stage converts the fp32
  /// model it is given, the shard owner keeps fp32 master values, and the gradients, the
  /// parameter gathers and the activations between stages move in 16 bits.
  DataType dtype = DataType::f32;
  /// The type gradients are reduced in ([precision] communication_data_type): unset, the
  /// dtype; fp32 under a 16-bit dtype (the optimizer then gets the fp32 reduced gradients).
  std::optional<DataType> reduce_type;
  /// Set: the loss is multiplied by the scaler's scale before backward; a step whose global
  /// gradient norm is not finite (an inf or NaN in any gradient of any rank) is skipped on
  /// every rank, and the gradients are divided by the scale in the update's pass.
  std::optional<LossScaleOptions> loss_scale;
  /// Fault injection for the scaler's tests (TROUPE_INJECT_OVERFLOW): at these steps
  /// (counted from 1) this rank's last stage backpropagates an infinite loss.
  std::set<int64_t> inject_overflow_steps;
};

caf::actor spawn_stage(caf::actor_system& system, StageOptions options);

}  // namespace troupe
