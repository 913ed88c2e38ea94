// Messages of the step driver (engine actor): the embedding API asks it for steps.
#pragma once

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>

namespace troupe {

/// Train one global batch; answered with step_report (or an error).
struct train_step {
  int64_t step = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_step& x) {
  return f(caf::meta::type_name("train_step"), x.step);
}

/// What one step did, as every rank sees it (loss is the global-batch mean).
struct step_report {
  int64_t step = 0;
  double loss = 0;
  double step_ms = 0;
  int64_t tokens = 0;             ///< tokens of the global batch
  std::string error;              ///< empty when the step succeeded
  double grad_norm = 0;           ///< global L2 norm of the gradients, before clipping
  int64_t model_state_bytes = 0;  ///< largest parameter + gradient + optimizer-state peak of any rank
  int64_t parameter_bytes = 0;    ///< this rank's peaks of the step, by kind
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t communication_bytes = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_report& x) {
  return f(caf::meta::type_name("step_report"), x.step, x.loss, x.step_ms, x.tokens, x.error, x.grad_norm,
           x.model_state_bytes, x.parameter_bytes, x.gradient_bytes, x.optimizer_state_bytes,
           x.communication_bytes);
}

/// Every rank waits here at the end of training; answered with collective_done.
struct finish_training {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish_training&) {
  return f(caf::meta::type_name("finish_training"));
}

}  // namespace troupe
