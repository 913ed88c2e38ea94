// Messages between the simulator's actors (sim_stage.hpp, services.hpp), besides the
// runtime's own protocols (actors/protocol/), which they speak to the real scheduler.
// They never leave the process: no serialization.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/action.hpp"
#include "sim/virtual_clock.hpp"

namespace troupe::sim {

/// A transfer from a neighbouring stage has arrived, by its key (sim_stage.cpp).
struct sim_arrival {
  uint64_t key = 0;
};

/// A send of action `index` has left: its buffer is free again.
struct sim_sent {
  int64_t step = 0;
  int64_t index = 0;
};

/// A compute of action `index` ran on the rank's stream from `start` to now.
struct sim_computed {
  int64_t step = 0;
  int64_t index = 0;
  pipeline::Op op = pipeline::Op::forward;
  int64_t micro = 0;
  Nanos start = 0;
};

enum class GroupOp { all_reduce, reduce_scatter, all_gather };

/// A member joins a collective of its data-parallel group. It may start once every member
/// has joined and each one's data is ready (`earliest`: with overlap, when the rank's
/// gradients began to be final); it then ends `duration` later, and no sooner than
/// `tail` × duration after the last member joined (the last bucket, which only the end
/// of the backward makes final). `beside_compute`: the member has passes of the step still
/// to run, which the collective runs beside.
struct group_join {
  uint64_t key = 0;
  int64_t rank = 0;
  std::vector<int64_t> members;
  GroupOp op = GroupOp::all_reduce;
  int64_t bytes = 0;
  Nanos earliest = 0;
  double tail = 1;
  std::string name;
  caf::actor reply_to;
  bool beside_compute = false;
};

/// The collective `key` has ended for this member.
struct group_done {
  uint64_t key = 0;
};

}  // namespace troupe::sim

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::sim::sim_arrival)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::sim::sim_sent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::sim::sim_computed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::sim::group_join)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::sim::group_done)
