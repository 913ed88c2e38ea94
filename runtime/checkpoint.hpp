// What a rank writes into a checkpoint and how it takes it back (the folder contract is
// memory/checkpoint_dir.hpp, the writing actors/checkpoint_writer.hpp).
//
// Each rank writes, for each of its chunks (pipeline virtual stages):
//   rankRRRRR-vsVVV-ARRAY.bin   fp32 arrays of the partition it owns: "values" (the fp32
//                               parameters, the master copy under mixed precision), then the
//                               optimizer state ("exp_avg", "exp_avg_sq"; SGD's
//                               "momentum_buffer"). At ZeRO 0 the replicas split the model
//                               between them, so each element is written once.
//   rankRRRRR.json              where every run of every parameter lies in those files (its
//                               name in the whole model, element offset and count), the
//                               optimizer's step count of each parameter, the update count
//                               (the learning-rate schedule's position), the loss scaler,
//                               and under tensor parallelism which slice of each split
//                               tensor it holds (the pieces are in the slice's own order;
//                               a tensor each member holds whole is written by member 0).
//   rankRRRRR-rng.bin           the rank's LibTorch CPU generator state.
//
// Loading reads what the new layout owns wherever it was saved (plan_reads), so a
// checkpoint loads into another dp, tp, ZeRO stage, offload tier or pipeline cut. Each file read
// is checked against the manifest's size and CRC32C first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/protocol/checkpoint.hpp"
#include "actors/protocol/checkpoint_writer.hpp"
#include "base/result.hpp"
#include "memory/checkpoint_ranges.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// One chunk of this rank as a checkpoint sees it.
struct ChunkCheckpoint {
  int64_t virtual_stage = 0;
  stage_layout layout;
  std::vector<std::string> names;   ///< by tensor (stage order): its name in the whole model
  std::vector<TensorShard> shards;  ///< by tensor: the part of the whole tensor it holds (tp)
};

/// This rank's place, as saving and loading need it.
struct RankCheckpoint {
  int64_t rank = 0;
  int64_t replica = 0;  ///< in its data-parallel group
  int64_t dp = 1;
  int64_t shard = 0;                ///< its position in its tensor-parallel group
  ZeroPolicy zero;                  ///< the job's: whether every replica holds the whole model
  std::vector<std::string> arrays;  ///< "values", then the optimizer's state arrays
  std::vector<ChunkCheckpoint> chunks;
};

/// The names of the arrays a partition holds under `optimizer`.
std::vector<std::string> checkpoint_arrays(const OptimizerConfig& optimizer);

/// One parameter of the whole model, in model order.
struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
};

/// The manifest's meta: what the job was, and the model's parameters in order (what
/// `troupe export` consolidates).
std::string checkpoint_meta(const JobConfig& job, const std::vector<std::string>& arrays,
                            const std::vector<ModelTensor>& model);

/// Every parameter's fp32 values from the checkpoint in `dir` (DeepSpeed's zero_to_fp32),
/// in model order, whatever layout saved them; with `with_state`, the optimizer's arrays and
/// step counts and the run's position too (what one process needs to continue the run).
struct ConsolidatedParameters {
  std::vector<ModelTensor> tensors;
  std::vector<std::vector<float>> values;  ///< by tensor
  std::vector<std::string> arrays;         ///< "values", then the optimizer's state arrays
  std::vector<std::vector<std::vector<float>>> state;  ///< with_state: by state array, by tensor
  std::vector<int64_t> steps;                          ///< with_state: by tensor
  int64_t step = 0;                                    ///< training steps done
  int64_t updates_applied = 0;
  int64_t samples = -1;  ///< training samples consumed (the data's position); -1: not recorded
  std::optional<LossScalerState> scaler;
  std::optional<ModelConfig> model;  ///< the model's family and shape (absent in older checkpoints)
};
Result<ConsolidatedParameters> consolidate_parameters(const std::string& dir, bool with_state = false);

/// This rank's files for the save after `step` steps, when `samples` training samples have
/// been read (the data's position); `snapshots` by chunk.
std::vector<CheckpointBlob> rank_checkpoint_files(const RankCheckpoint& rank, int64_t step,
                                                  const std::vector<stage_snapshot>& snapshots,
                                                  std::vector<char> rng_state, int64_t samples);

/// What a rank takes back from a checkpoint.
struct ResumedRank {
  int64_t step = 0;
  int64_t samples = -1;  ///< training samples consumed before it; -1: not recorded (older checkpoints)
  std::vector<restore_stage> chunks;
  std::vector<char> rng_state;  ///< this rank's own; empty when the checkpoint has none for it
};

/// The checkpoint folder [checkpoint] resume names: the folder itself, or for "latest" the
/// newest complete one under dir (none: start afresh).
Result<std::optional<std::string>> resume_folder(const CheckpointConfig& config);

/// Reads what `rank` owns from the checkpoint in `dir`.
Result<ResumedRank> load_rank_checkpoint(const std::string& dir, const RankCheckpoint& rank);

}  // namespace troupe
