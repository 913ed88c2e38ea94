// Messages between a rank's scheduler actor and its stage actor: the scheduler walks the
// stage's program (pipeline/action.hpp) and hands the stage its actions in order, a
// window at a time; the stage runs each when what it needs has arrived (a micro-batch, a
// neighbour's activation or gradient) and answers every one. reduce_gradients is answered
// with gradients_ready and optimizer_step with step_applied (protocol/stage.hpp), the
// others with action_done.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/protocol/data.hpp"
#include "memory/host_buffer.hpp"
#include "pipeline/action.hpp"

namespace troupe {

/// Action `index` of the stage's program for `step`. A load carries its micro-batch.
struct stage_action {
  int64_t step = 0;
  int64_t index = 0;
  pipeline::Action action;
  int64_t micro_count = 1;
  MicroBatchPtr batch;  ///< load only
  /// A validation pass's (step = its batch): forward only, no gradients, the loss kept aside.
  bool eval = false;
};

/// After a validation batch's forwards: the chunk's sum of its micro-batch losses and their
/// count (both 0 but on the last stage); answered with eval_loss.
struct eval_loss_request {
  int64_t batch = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_loss_request& x) {
  return f(caf::meta::type_name("eval_loss_request"), x.batch);
}
struct eval_loss {
  double sum = 0;
  int64_t count = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_loss& x) {
  return f(caf::meta::type_name("eval_loss"), x.sum, x.count);
}

/// Action `index` of `step` has finished: its compute ran, its message arrived or its
/// buffer was handed to the peer.
struct action_done {
  int64_t step = 0;
  int64_t index = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, action_done& x) {
  return f(caf::meta::type_name("action_done"), x.step, x.index);
}

/// Compute action `index` of `step` is on the compute stream (enqueued): with several
/// chunks sharing the stream, the scheduler hands a chunk the next compute action only
/// then, so the stream runs the rank's computes in program order, as its schedule planned.
struct compute_started {
  int64_t step = 0;
  int64_t index = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, compute_started& x) {
  return f(caf::meta::type_name("compute_started"), x.step, x.index);
}

/// Internal to the stage: a forward ran on the compute stream. `output` holds the bytes
/// for the next stage (none on the last, whose forward ends in the loss), shaped `shape`.
struct forward_computed {
  int64_t step = 0;
  int64_t micro = 0;
  std::shared_ptr<HostBuffer> output;
  std::vector<int64_t> shape;
  double seconds = 0;  ///< the work item's time on the stream
  double eval_loss = 0;  ///< a validation forward's loss on the last stage
};

/// Internal to the stage: a backward (`op`: whole, input half or weight half) ran;
/// `input_gradient` is the gradient of the forward's input for the previous stage (none on
/// the first stage, none from a weight half).
struct backward_computed {
  pipeline::Op op = pipeline::Op::backward;
  int64_t step = 0;
  int64_t micro = 0;
  std::shared_ptr<HostBuffer> input_gradient;
  double seconds = 0;
};

/// Between two chunks of one rank (virtual stages: the bottom of a V, or a pipeline of one
/// rank): an activation or its gradient, by the key it would travel under between ranks,
/// with its shape. The buffer is the receiver's from then on.
struct local_transfer {
  uint64_t key = 0;
  std::shared_ptr<HostBuffer> buffer;
  std::vector<int64_t> shape;
};

/// From the engine once every chunk of the rank is spawned: the chunks before and after
/// this one in the model that live on this rank (null where the neighbour is elsewhere).
struct local_neighbours {
  caf::actor previous;
  caf::actor next;
};

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::local_transfer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::local_neighbours)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::stage_action)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::forward_computed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::backward_computed)
