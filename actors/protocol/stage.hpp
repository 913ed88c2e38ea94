// Messages of the stage actor (one pipeline stage: the model's layers and its compute
// stream) and what it reports to the step driver.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>

#include "actors/protocol/data.hpp"
#include "actors/protocol/step_stats.hpp"
#include "memory/host_buffer.hpp"

namespace troupe {

/// Forward and backward of one micro-batch; the last of a step starts gradient reduction.
struct run_micro_batch {
  int64_t step = 0;
  int64_t micro = 0;
  int64_t micro_count = 1;
  MicroBatchPtr batch;
};

/// Every gradient bucket of `step` is averaged across ranks; loss is the global mean.
struct gradients_ready {
  int64_t step = 0;
  double loss = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradients_ready& x) {
  return f(caf::meta::type_name("gradients_ready"), x.step, x.loss);
}

/// Run the optimizer on the reduced gradients; answered with step_applied.
struct apply_step {
  int64_t step = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, apply_step& x) {
  return f(caf::meta::type_name("apply_step"), x.step);
}

/// The step's parameters are updated on every rank; stats holds the gradient norm and
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
/// collective); the step driver turns it into the error of the step.
struct stage_failed {
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_failed& x) {
  return f(caf::meta::type_name("stage_failed"), x.error);
}

/// Internal: the compute thread has this step's loss (in the stage's loss buffer). Its
/// all-reduce waits until every gradient row has been reduced, so that every rank hands the
/// comm agent the same calls in the same order however the rows travelled.
struct loss_computed {
  int64_t step = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loss_computed& x) {
  return f(caf::meta::type_name("loss_computed"), x.step);
}

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::run_micro_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::parameters_collected)
