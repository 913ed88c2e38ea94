// Messages of the scheduler actor (actors/scheduler.hpp): the embedding API asks it for steps.
#pragma once

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>

#include "actors/protocol/step_stats.hpp"

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
  int64_t tokens = 0;  ///< tokens of the global batch
  std::string error;   ///< empty when the step succeeded
  StepStats stats;     ///< gradient norm and memory of the step
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_report& x) {
  return f(caf::meta::type_name("step_report"), x.step, x.loss, x.step_ms, x.tokens, x.error, x.stats);
}

/// Runs validation batch `batch` forward only on every rank; answered with eval_report.
struct eval_step {
  int64_t batch = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_step& x) {
  return f(caf::meta::type_name("eval_step"), x.batch);
}

/// The batch's mean micro-batch loss over every replica (the same on every rank).
struct eval_report {
  double loss = 0;
  std::string error;  ///< empty when the batch ran
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_report& x) {
  return f(caf::meta::type_name("eval_report"), x.loss, x.error);
}

/// Every rank waits here at the end of training; answered with collective_done.
struct finish_training {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish_training&) {
  return f(caf::meta::type_name("finish_training"));
}

}  // namespace troupe
