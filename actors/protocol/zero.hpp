// Messages of the shard owner (one data-parallel partition's master parameters,
// gradients and optimizer state) and what the stage asks of it. Every request is
// answered to `reply_to` once the work has run on the owner's stream.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>

#include "actors/protocol/comm.hpp"
#include "memory/parameter_runs.hpp"
#include "optim/lr_schedule.hpp"

namespace troupe {

/// A new accumulation begins: the gradient partition is zeroed (stages 2-3).
struct begin_accumulation {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, begin_accumulation&) {
  return f(caf::meta::type_name("begin_accumulation"));
}

/// Add `block` (this rank's reduced block of gradient row `row`) into the partition;
/// answered with gradients_absorbed so the bucket buffer `slot` can be reused.
struct absorb_gradients {
  uint64_t row = 0;
  uint64_t slot = 0;
  BufferSpan block;
  caf::actor reply_to;
};
struct gradients_absorbed {
  uint64_t row = 0;
  uint64_t slot = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradients_absorbed& x) {
  return f(caf::meta::type_name("gradients_absorbed"), x.row, x.slot);
}

/// The sum of squares of the partition's gradients; answered with gradient_square_sum.
struct measure_gradients {
  caf::actor reply_to;
};
struct gradient_square_sum {
  double sum = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradient_square_sum& x) {
  return f(caf::meta::type_name("gradient_square_sum"), x.sum);
}

/// Scale the gradients by `scale` (clipping; 1 = none) and run the optimizer on the
/// partition's parameters that `used` names (null: all of them); answered with shard_updated.
struct update_shard {
  int64_t step = 0;
  double scale = 1;
  ParameterUse used;
  UpdateHyper hyper;  ///< the rate and betas of this update (a learning-rate schedule's)
  caf::actor reply_to;
};
struct shard_updated {
  int64_t step = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_updated& x) {
  return f(caf::meta::type_name("shard_updated"), x.step);
}

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::absorb_gradients)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::measure_gradients)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::update_shard)
