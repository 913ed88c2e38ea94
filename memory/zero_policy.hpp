// ZeroPolicy: what a ZeRO stage does, decided once per job from the config's stage number
// and read everywhere else. The number itself only names the policy (in the config, the
// manifest and messages); every choice the runtime makes asks one of the questions below.
//
//   stage  optimizer state  gradients        parameters
//   0      whole            flat, all-reduce  the model's own tensors
//   1      partitioned      flat, reduce-scatter, then gathered after the update
//   2      partitioned      partitioned       flat, gathered after the update
//   3      partitioned      partitioned       partitioned, gathered before use
//
// The three partitions are DeepSpeed's definition; the rest follows from them: whoever
// partitions the optimizer state reduce-scatters and gathers the updated parameters
// back, whoever partitions gradients reduces each bucket as backward fills it (every
// micro-batch) and accumulates only its block, whoever partitions parameters lays them
// out by layer and gathers a layer's rows before it runs.
// Thread safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.hpp"

namespace troupe {

/// Where a rank's parameters live between uses.
enum class ParameterHome : uint8_t {
  model_tensors,  ///< the model's own tensors, each whole
  flat,           ///< views into one flat buffer of the whole model
  partition,      ///< only this rank's blocks; rows gathered before use and dropped after
};

class ZeroPolicy {
 public:
  /// Stage 0: nothing partitioned.
  constexpr ZeroPolicy() = default;
  /// The policy of ZeRO stage 0, 1, 2 or 3; another number is an error naming it.
  static Result<ZeroPolicy> for_stage(int64_t stage);
  /// The same for a stage already validated (the config's): a bad number is a bug.
  static ZeroPolicy of(int64_t stage);

  /// The config's name for it: for the manifest and messages, never for a decision.
  constexpr int64_t stage() const { return stage_; }

  // What is partitioned across the data-parallel group.
  constexpr bool partitions_optimizer_state() const { return stage_ >= 1; }
  constexpr bool partitions_gradients() const { return stage_ >= 2; }
  constexpr bool partitions_parameters() const { return stage_ >= 3; }

  /// Each rank's optimizer updates whole tensors (every rank the same) rather than its
  /// block of every row, and so holds every reduced gradient: the norm needs no sum
  /// across replicas and the shards are the model's parameters.
  constexpr bool every_rank_updates_everything() const { return !partitions_optimizer_state(); }
  /// Blocks each row is cut into over `dp` ranks.
  constexpr int64_t blocks_per_row(int64_t dp) const { return partitions_optimizer_state() ? dp : 1; }
  /// Gradients are reduce-scattered into this rank's block (else all-reduced whole).
  constexpr bool reduce_scatters() const { return partitions_optimizer_state(); }

  constexpr ParameterHome parameter_home() const {
    return partitions_parameters()        ? ParameterHome::partition
           : partitions_optimizer_state() ? ParameterHome::flat
                                          : ParameterHome::model_tensors;
  }
  /// Autograd's gradients accumulate in one flat buffer of the whole model, reduced once
  /// at the step's end; else each bucket is reduced as backward fills it, every
  /// micro-batch, through bucket buffers, and only this rank's block is kept.
  constexpr bool keeps_flat_gradients() const { return !partitions_gradients(); }
  constexpr bool reduces_every_micro_batch() const { return partitions_gradients(); }
  /// Compute waits on collectives of its own (a free bucket, a gathered row) mid-pass.
  constexpr bool compute_waits_for_collectives() const { return partitions_gradients(); }
  /// Parameters are laid out a layer to a row and gathered before the layer runs.
  constexpr bool gathers_before_use() const { return partitions_parameters(); }
  /// After the update, row k (`persistent`: one that stays gathered) is all-gathered from
  /// every rank's updated block.
  constexpr bool gathers_after_update(bool persistent) const {
    return partitions_optimizer_state() && (!partitions_parameters() || persistent);
  }
  /// The loss scaler stops the job at its minimum scale rather than going on (DeepSpeed's
  /// ZeRO optimizers raise there; its stage-0 fp16 optimizer only warns).
  constexpr bool stops_at_minimum_loss_scale() const { return partitions_optimizer_state(); }

  constexpr bool operator==(const ZeroPolicy& other) const { return stage_ == other.stage_; }
  constexpr bool operator!=(const ZeroPolicy& other) const { return stage_ != other.stage_; }

 private:
  constexpr explicit ZeroPolicy(int64_t stage) : stage_(stage) {}
  int64_t stage_ = 0;
};

}  // namespace troupe
