// The simulator's time. `troupe simulate` runs the job's scheduler actors on CAF's
// deterministic coordinator, and everything that would take time (a layer's compute, a
// transfer, a collective, an NVMe read) becomes an event on this clock instead: the
// coordinator runs every message it can, then the clock jumps to the earliest event and
// fires it, and so on until nothing is left. Events at the same instant fire in the order
// they were scheduled, so one seed gives one timeline.
// Thread safety: none; it is driven from the one thread that runs the coordinator.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace troupe::sim {

using Nanos = int64_t;

constexpr Nanos seconds_to_nanos(double seconds) {
  return static_cast<Nanos>(seconds * 1e9 + 0.5);
}
constexpr double nanos_to_ms(Nanos nanos) {
  return static_cast<double>(nanos) / 1e6;
}

class VirtualClock {
 public:
  Nanos now() const { return now_; }
  /// The time as the actors read it: the steady clock's epoch plus now().
  std::chrono::steady_clock::time_point time_point() const;
  /// Fires `fire` when the clock reaches `when` (at once, on the next advance, if earlier).
  void at(Nanos when, std::function<void()> fire);
  void after(Nanos delay, std::function<void()> fire) { at(now_ + delay, std::move(fire)); }
  bool idle() const { return events_.empty(); }
  /// Moves to the earliest event and fires it; false when there is none.
  bool advance();
  /// Events fired so far.
  int64_t fired() const { return fired_; }

 private:
  struct Event {
    Nanos when = 0;
    uint64_t order = 0;  // scheduling order: breaks ties at one instant
    std::function<void()> fire;
  };
  static bool later(const Event& a, const Event& b);
  std::vector<Event> events_;  // a heap, earliest on top
  Nanos now_ = 0;
  uint64_t next_order_ = 0;
  int64_t fired_ = 0;
};

}  // namespace troupe::sim
