// Messages of the monitor actor (actors/monitor.hpp).
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

/// One named value of a step, as TensorBoard shows it: "train/loss", 2.31.
struct MonitorScalar {
  std::string tag;
  double value = 0;
};

/// What the monitor writes for one step: its scalars, stamped with the time they were taken.
struct MonitorRecord {
  int64_t step = 0;
  double wall_time = 0;  ///< seconds since the Unix epoch
  std::vector<MonitorScalar> scalars;
};

/// A request, answered with monitor_drained once every record sent before it is written
/// (or given up on).
struct await_monitor {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, await_monitor&) {
  return f(caf::meta::type_name("await_monitor"));
}

struct monitor_drained {
  int64_t written = 0;  ///< records the stream took (each sink that had not failed wrote them)
  int64_t dropped = 0;  ///< records dropped because writing was behind by the queue's size
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, monitor_drained& x) {
  return f(caf::meta::type_name("monitor_drained"), x.written, x.dropped);
}

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::MonitorRecord)
