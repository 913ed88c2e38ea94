// What a step measured besides its loss and time: the gradients' global norm and the
// memory each kind held. The stage measures it, the scheduler actor and the embedding API
// hand it on unchanged.
#pragma once

#include <caf/meta/type_name.hpp>

#include <cstdint>

namespace troupe {

struct StepStats {
  double grad_norm = 0;           ///< global L2 norm of the gradients, before clipping
  int64_t model_state_bytes = 0;  ///< largest parameter + gradient + optimizer-state peak of any rank
  int64_t parameter_bytes = 0;    ///< this rank's peaks of the step, by kind
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t communication_bytes = 0;
  int64_t activation_bytes = 0;  ///< this rank's peak of MemoryKind::activations
  /// This rank's model state and communication buffers in the device's memory (their
  /// peaks; 0 on the host path).
  int64_t device_bytes = 0;
  /// The stage's forward and backward seconds of the step, the mean over its data-parallel
  /// replicas (exchanged with the memory peaks after the update).
  double busy_s = 0;
  /// The pipeline's idle fraction of the step: 1 − busy compute time / (stages × step
  /// time), busy summed over the stages and averaged over replicas (with one stage too: a
  /// replica that waits for a slower one idles as much as a pipeline stage does); 0 on
  /// its own, one stage idles only outside forward and backward.
  double bubble = 0;
  double lr = 0;  ///< the learning rate the step's update ran at
  /// Loss scaling: the scale the step's backward ran with (0: none), and whether the step
  /// overflowed and was skipped on every rank (no update; grad_norm is then not finite).
  double loss_scale = 0;
  bool skipped = false;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepStats& x) {
  return f(caf::meta::type_name("StepStats"), x.grad_norm, x.model_state_bytes, x.parameter_bytes,
           x.gradient_bytes, x.optimizer_state_bytes, x.communication_bytes, x.activation_bytes,
           x.device_bytes, x.busy_s, x.bubble, x.lr, x.loss_scale, x.skipped);
}

}  // namespace troupe
