// Messages of the offload manager: one optimizer pass over the partition whose state it
// keeps in its tier, and the completions it hears from its stream and the NVMe store.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>

#include "memory/parameter_runs.hpp"
#include "optim/lr_schedule.hpp"

namespace troupe {

/// Update every sub-group of the partition (gradients already scaled); answered with
/// optimizer_pass_done (error empty on success).
struct optimizer_pass {
  int64_t step = 0;
  ParameterUse used;  ///< the parameters to update (null: all)
  UpdateHyper hyper;  ///< the rate and betas of this update (a learning-rate schedule's)
  /// 16-bit gradients are multiplied by it as they are widened (clipping; unscaling the
  /// loss scale), so they are rounded once; fp32 gradients arrive scaled already.
  double gradient_scale = 1;
  caf::actor reply_to;
};
struct optimizer_pass_done {
  int64_t step = 0;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_pass_done& x) {
  return f(caf::meta::type_name("optimizer_pass_done"), x.step, x.error);
}

/// Internal: sub-group `group`'s state is in its swap buffer (read, or zeroed on first use).
struct state_loaded {
  uint64_t group = 0;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_loaded& x) {
  return f(caf::meta::type_name("state_loaded"), x.group, x.error);
}

/// Internal: the optimizer updated sub-group `group` on the stream.
struct group_updated {
  uint64_t group = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_updated& x) {
  return f(caf::meta::type_name("group_updated"), x.group);
}

/// Internal: sub-group `group`'s state is back in its tier.
struct state_stored {
  uint64_t group = 0;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_stored& x) {
  return f(caf::meta::type_name("state_stored"), x.group, x.error);
}

/// Internal: the checkpoint's reads or writes of group `group` finished (one per transfer,
/// and one for their start).
struct checkpoint_io {
  uint64_t group = 0;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_io& x) {
  return f(caf::meta::type_name("checkpoint_io"), x.group, x.error);
}

/// Internal: the stream has copied group `group` for the checkpoint (~0: every group).
struct checkpoint_copied {
  uint64_t group = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_copied& x) {
  return f(caf::meta::type_name("checkpoint_copied"), x.group);
}

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::optimizer_pass)
