// troupe's embedding API: a C++ trainer joins the cluster, hands over its model as a
// sequence of LibTorch layers with its loss and data, and trains.
//
//   auto config = troupe::load_config_file("job.toml", {});
//   torch::manual_seed(config->train.seed);               // same weights on every rank
//   auto engine = troupe::Engine::make(*config, {layers, loss, data});
//   for (int i = 0; i < steps; ++i) { auto r = (*engine)->train_batch(); ... }
//   (*engine)->finish();
//
// With [monitor] folders set, rank 0 writes each step's scalars there as `troupe run`
// does (TensorBoard's event files, DeepSpeed's CSV files): a step's record waits for the
// evaluate() that may follow it, and finish() writes the last.
// Each process is one rank. Its rank and world size come from the environment of
// whichever launcher started it (`troupe launch`, `troupe run`, torchrun, SLURM,
// Open MPI), or from TROUPE_RANK/TROUPE_WORLD_SIZE; a world of one needs none.
// Thread safety: an Engine is driven from one thread; calls block until done, and
// every wait is bounded by the cluster's timeouts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actors/micro_batch.hpp"
#include "actors/protocol/step_stats.hpp"
#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/load.hpp"
#include "runtime/config/resolve.hpp"
#include "runtime/gpt_job.hpp"  // the built-in GPT job, as `troupe run` trains it
#include "runtime/launch/environment.hpp"
#include "runtime/metrics.hpp"
#include "runtime/model/tensor_parallel_group.hpp"

namespace troupe {

/// What the trainer hands over: layers run in order, the loss of the last layer's
/// output against the target, and the data (global samples → a micro-batch).
struct Trainable {
  torch::nn::Sequential layers;
  LossFunction loss;
  MicroBatchSource data;
  /// Optional: builds the optimizer; by default the one in [optimizer].
  OptimizerFactory make_optimizer;
  /// Optional: which layers run for each micro-batch (layer drop, early exit); all of
  /// them in order by default. With ZeRO stage 3 every rank must get the same sequence;
  /// ranks that differ stop with an error naming the step and the layer.
  LayerSchedule schedule;
  /// [parallel] tp > 1: the group the model's tensor-parallel layers were built over
  /// (Engine::tensor_parallel_group; runtime/model/tensor_parallel.hpp has the layers).
  std::shared_ptr<TensorParallelGroup> tensor_parallel;
  /// Optional: each layer's share of the compute (its forward and backward FLOPs per
  /// micro-batch, or any numbers in proportion), which [pipeline] partition = "flops", the
  /// default, balances across stages; empty: each layer's parameter count stands in.
  std::vector<double> layer_costs{};
  /// Optional: the validation samples (numbered as `data`'s), which Engine::evaluate() runs.
  MicroBatchSource validation{};
  /// Optional: the model's matrix-product FLOPs of one step (forward and backward over the
  /// global batch), for StepResult::mfu; 0: no MFU.
  double step_flops = 0;
  /// The layers hold [model] init_from's values already, so the engine loads nothing: a
  /// tensor-parallel model's shards cut from the loaded whole model (the built-in job's).
  bool starts_from_init = false;
};

/// One optimizer step, as every rank sees it.
struct StepResult {
  int64_t step = 0;  ///< counts from 1
  double loss = 0;   ///< mean loss over the global batch
  double step_ms = 0;
  int64_t tokens = 0;  ///< target elements in the global batch
  double tokens_per_s = 0;
  StepStats stats;  ///< gradient norm (before clipping) and memory held, by kind
  int64_t sent_bytes = 0;  ///< payload bytes this rank sent to its peers during the step
  double step_flops = 0;   ///< Trainable::step_flops
  /// Rank 0 (0 elsewhere): step_flops / (step time × ranks × rank 0's measured matrix-product
  /// rate in the job's dtype); 0 without Trainable::step_flops.
  double mfu = 0;
};

/// The step as the metrics file and the monitors write it (no validation loss, no
/// parameter count: the trainer adds what it knows).
StepMetrics step_metrics(const StepResult& result, int64_t steps_total);

class Engine {
 public:
  /// Joins the cluster described by `config` (validated here), broadcasts rank 0's
  /// parameters so every rank starts equal, and starts this rank's actors.
  /// `rank` overrides what the environment says (tests, custom launchers).
  static Result<std::unique_ptr<Engine>> make(JobConfig config, Trainable trainable,
                                              std::optional<RankEnvironment> rank = std::nullopt);
  /// [parallel] tp > 1: this rank's tensor-parallel group (its size, its position, whether
  /// sequence parallelism is on), for building the model's tensor-parallel layers before
  /// Engine::make, which binds it to the cluster. Null when tp = 1.
  static Result<std::shared_ptr<TensorParallelGroup>> tensor_parallel_group(
      const JobConfig& config, std::optional<RankEnvironment> rank = std::nullopt);
  /// Leaves the cluster; finish() first for an orderly end.
  ~Engine();

  /// Trains one global batch: every rank calls it the same number of times.
  Result<StepResult> train_batch();
  /// Runs [train] eval_steps global batches of the trainable's validation samples forward
  /// only, with no update: every rank calls it at the same point between steps. Returns the
  /// mean loss over them (the same on every rank).
  Result<double> evaluate();
  /// Waits for every rank to finish and writes the trace when [trace] path is set.
  Status finish();

  int64_t rank() const;
  int64_t world_size() const;
  /// Steps trained so far: 0 at the start, the checkpoint's step after a resume
  /// ([checkpoint] resume), so a loop runs `while (engine->steps_done() < steps)`.
  int64_t steps_done() const;
  const JobConfig& config() const;
  /// The model's parameters, flattened in order (for checks against a reference).
  /// Collective: every rank calls it (ZeRO stage 3 gathers the partitions). With pp > 1,
  /// rank 0 gets the whole model (every stage's, in order) and other ranks their stage's.
  Result<torch::Tensor> gather_parameters();

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
