// The monitor actor: rank 0's writer of per-step scalars to the files people watch training
// with (TensorBoard's event files, DeepSpeed's CSV files: runtime/monitor/), so that the
// training loop only sends a message and goes on.
//
// Writing never slows or stops training: the sinks run on a stream of the monitor's own (no
// actor thread waits on the disk), and at most `queue` records wait for it; a record that
// arrives while that many are unwritten is dropped, and the first drop is said once. A sink
// that fails (a folder that cannot be made, a full disk) says so once and writes nothing
// more; the others go on.
//
// Protocol (actors/protocol/monitor.hpp): MonitorRecord, one per step, in step order;
// await_monitor → monitor_drained once every record sent before it is written.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "base/trace.hpp"

namespace troupe {

struct MonitorRecord;

/// Where records go. A sink is used by the monitor's stream only, one call at a time.
class MonitorSink {
 public:
  virtual ~MonitorSink() = default;
  /// What it writes to, for messages: "TensorBoard folder runs/a".
  virtual std::string where() const = 0;
  /// Makes the files ready; a run resumed after step `kept_through` > 0 keeps what earlier
  /// runs wrote of the steps up to it and drops the rest.
  virtual Status open(int64_t kept_through) = 0;
  /// Writes (and flushes) one step's scalars.
  virtual Status write(const MonitorRecord& record) = 0;
};

struct MonitorOptions {
  std::vector<std::shared_ptr<MonitorSink>> sinks;
  int64_t queue = 1024;      ///< records that may wait for the disk before more are dropped
  int64_t kept_through = 0;  ///< a resumed run's last kept step (MonitorSink::open)
  /// Says a problem once (a failing sink, the first dropped record); spdlog's warning by default.
  std::function<void(const std::string&)> say;
  /// Set (by any thread), the records still queued for the stream are given up on at once:
  /// the monitor's owner stops waiting for a disk that does not answer.
  std::shared_ptr<std::atomic<bool>> cancelled;
  Tracer* tracer = nullptr;
};

caf::actor spawn_monitor(caf::actor_system& system, MonitorOptions options);

}  // namespace troupe
