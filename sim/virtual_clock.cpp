#include "sim/virtual_clock.hpp"

#include <algorithm>

namespace troupe::sim {

std::chrono::steady_clock::time_point VirtualClock::time_point() const {
  return std::chrono::steady_clock::time_point{} + std::chrono::nanoseconds(now_);
}

bool VirtualClock::later(const Event& a, const Event& b) {
  return a.when != b.when ? a.when > b.when : a.order > b.order;
}

void VirtualClock::at(Nanos when, std::function<void()> fire) {
  events_.push_back(Event{std::max(when, now_), next_order_++, std::move(fire)});
  std::push_heap(events_.begin(), events_.end(), later);
}

bool VirtualClock::advance() {
  if (events_.empty()) return false;
  std::pop_heap(events_.begin(), events_.end(), later);
  Event event = std::move(events_.back());
  events_.pop_back();
  now_ = event.when;
  ++fired_;
  event.fire();
  return true;
}

}  // namespace troupe::sim
