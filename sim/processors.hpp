// A host's compute as its ranks share it. A GPU rank has a device of its own: each compute
// takes its cost. The ranks of a CPU host share its cores: when more computes run at once
// than the cores hold (cores / threads per rank), each runs at capacity / running of full
// speed (processor sharing), so a stage that computes alone in a pipeline's warm-up runs
// faster than when every stage computes. Other work takes its part too: a collective's
// progress thread is one core's worth of work, a fraction of a compute's threads (its
// `demand`); when the demands add up to more than the capacity every piece of work runs at
// capacity / demand. The rate changes whenever work starts or ends, and each one's end is
// found again.
// Thread safety: none; driven by the simulator's one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sim/virtual_clock.hpp"

namespace troupe::sim {

class SharedProcessors {
 public:
  /// `capacity`: computes that run at full speed at once; 0 for no limit (a device per rank).
  SharedProcessors(VirtualClock& clock, double capacity);
  /// Starts work that alone takes `cost` and uses `demand` of a compute's processors (1: a
  /// compute); `done` fires when it ends.
  void start(Nanos cost, std::function<void()> done, double demand = 1);
  /// Computes running now.
  std::size_t running() const { return jobs_.size(); }

 private:
  struct Job {
    double remaining = 0;  // nanoseconds of work at full speed
    double demand = 1;
    std::function<void()> done;
  };
  double rate() const;
  void settle();  // charges the time since the last change to every running job
  void plan();    // schedules the next end at the current rate

  VirtualClock* clock_;
  double capacity_;
  std::vector<Job> jobs_;
  Nanos since_ = 0;
  uint64_t generation_ = 0;  // a planned end is stale once the set of jobs changed
};

}  // namespace troupe::sim
