// The reference trainer: the job's training loop in plain single-process LibTorch.
//
// No actors, no communication, no sharding: the model from make_gpt, the optimizer from
// make_optimizer, and for step s the global batch = samples [s × G, (s + 1) × G) of the
// sample stream, processed in micro-batches of micro_batch_size with gradient accumulation.
// Before each optimizer step the global L2 gradient norm is taken and, when
// optimizer.gradient_clipping > 0, the gradients are clipped to it (DeepSpeed's rule).
// The distributed runtime must reproduce its per-step losses (integration tests compare
// them to 1e-5 relative), so this file is the specification of "what training means".
// Thread safety: call from one thread; it sets torch's global thread count and seed.
#pragma once

#include <functional>
#include <vector>

#include <torch/types.h>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/metrics.hpp"

namespace troupe {

/// Trains the job's model for job.train.steps steps and returns one StepMetrics per step
/// (also passed to `on_step`, if set, as each step finishes), with the unclipped gradient
/// norm, the parameter count and the model-state bytes this one process holds (fp32
/// parameters and gradients, the optimizer state after the step; no communication). Uses
/// job.train.seed for the weights and for data sampling, and job.train.threads compute
/// threads (0 = all cores).
/// The batch triple must be resolved: global_batch_size a positive multiple of
/// micro_batch_size. When `final_parameters` is not null it receives the trained
/// parameters as one flat fp32 tensor (flatten_parameters order). LibTorch errors come
/// back as Error values.
Result<std::vector<StepMetrics>> train_reference(const JobConfig& job,
                                                 const std::function<void(const StepMetrics&)>& on_step,
                                                 torch::Tensor* final_parameters);

}  // namespace troupe
