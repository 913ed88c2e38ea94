// The stage actor: owns one pipeline stage of the model (all of it, while pp = 1),
// its optimizer and its compute stream. It never runs LibTorch on a CAF thread:
// forward, backward and the optimizer step are enqueued on the compute stream, and
// completions come back as messages. Gradient buckets go to the comm agent as soon as
// backward finishes them.
//
// Protocol (actors/protocol/stage.hpp): run_micro_batch → micro_batch_done;
// after the last micro-batch of a step → gradients_ready; apply_step → step_applied;
// any failure → stage_failed. Replies go to the actor that sent run_micro_batch.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

#include "actors/micro_batch.hpp"
#include "base/trace.hpp"

namespace troupe {

struct StageOptions {
  torch::nn::Sequential model;
  LossFunction loss;
  OptimizerFactory make_optimizer;
  int64_t reduce_bucket_bytes = 1 << 20;
  int64_t compute_threads = 1;  ///< intra-op threads of the compute stream (OpenMP, per thread)
  caf::actor comm_agent;
  Tracer* tracer = nullptr;
};

caf::actor spawn_stage(caf::actor_system& system, StageOptions options);

}  // namespace troupe
