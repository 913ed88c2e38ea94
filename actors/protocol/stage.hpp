// Messages of the stage actor (one pipeline stage: its layers and its compute stream)
// besides the actions of protocol/pipeline.hpp, and what it reports to the scheduler.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/data.hpp"
#include "actors/protocol/step_stats.hpp"
#include "memory/host_buffer.hpp"

namespace troupe {

/// Every gradient of `step` is reduced across the stage's replicas (the reduce_gradients
/// action is done). Without a pipeline: loss is the global batch's mean, tokens its target
/// elements, square_sum the gradient's. In a pipeline each stage (each chunk, with virtual
/// stages) answers its share, which the scheduler sums over the rank's chunks and gathers
/// over the world: the loss (last stage, first replica), its gradient square sum (once per
/// reduced gradient), its tokens (last stage) and its compute time over dp.
struct gradients_ready {
  int64_t step = 0;
  double loss = 0;
  int64_t tokens = 0;
  double busy_s = 0;  ///< forward and backward time of the step, summed over one replica's stages
  double square_sum = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradients_ready& x) {
  return f(caf::meta::type_name("gradients_ready"), x.step, x.loss, x.tokens, x.busy_s, x.square_sum);
}

/// In a pipeline, from the scheduler once every rank's shares are summed: the step's
/// global gradient norm, which the optimizer_step action (clipping) waits for.
struct gradients_summed {
  int64_t step = 0;
  double grad_norm = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradients_summed& x) {
  return f(caf::meta::type_name("gradients_summed"), x.step, x.grad_norm);
}

/// The optimizer_step action is done: the step's parameters are updated on every rank; stats holds the gradient norm and
/// the memory the step held.
struct step_applied {
  int64_t step = 0;
  StepStats stats;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_applied& x) {
  return f(caf::meta::type_name("step_applied"), x.step, x.stats);
}

/// Every rank asks at once (stage 3 gathers): the model's parameters in model order,
/// flattened; answered with parameters_collected.
struct collect_parameters {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, collect_parameters&) {
  return f(caf::meta::type_name("collect_parameters"));
}
struct parameters_collected {
  std::shared_ptr<HostBuffer> flat;  ///< fp32 values
  std::string error;
};

/// Anything that stops the stage from going on (an exception in compute, a failed
/// collective); the scheduler turns it into the error of the step.
struct stage_failed {
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_failed& x) {
  return f(caf::meta::type_name("stage_failed"), x.error);
}

/// Internal: the compute thread has this step's loss and which parameters got gradients. Its
/// all-reduce waits until every gradient row has been reduced, so that every rank hands the
/// comm agent the same calls in the same order however the rows travelled.
struct loss_computed {
  int64_t step = 0;
  float loss = 0;           ///< this rank's share of the step's loss (0 before the last stage)
  std::vector<float> used;  ///< by layout position: 1 where the parameter got a gradient
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loss_computed& x) {
  return f(caf::meta::type_name("loss_computed"), x.step, x.loss, x.used);
}

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::parameters_collected)
