#include "sim/processors.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::sim {

SharedProcessors::SharedProcessors(VirtualClock& clock, double capacity)
    : clock_(&clock), capacity_(capacity) {}

double SharedProcessors::rate() const {
  double demand = 0;
  for (const Job& job : jobs_) demand += job.demand;
  return capacity_ <= 0 || demand <= capacity_ ? 1.0 : capacity_ / demand;
}

void SharedProcessors::settle() {
  const double worked = static_cast<double>(clock_->now() - since_) * rate();
  for (Job& job : jobs_) job.remaining -= worked;
  since_ = clock_->now();
}

void SharedProcessors::start(Nanos cost, std::function<void()> done, double demand) {
  if (capacity_ <= 0) return clock_->after(cost, std::move(done));
  settle();
  jobs_.push_back(Job{static_cast<double>(cost), demand, std::move(done)});
  plan();
}

void SharedProcessors::plan() {
  const uint64_t generation = ++generation_;
  if (jobs_.empty()) return;
  double least = jobs_.front().remaining;
  for (const Job& job : jobs_) least = std::min(least, job.remaining);
  const auto wait = static_cast<Nanos>(std::ceil(std::max(0.0, least) / rate()));
  clock_->after(wait, [this, generation] {
    if (generation != generation_) return;
    settle();
    std::vector<std::function<void()>> ended;
    for (auto job = jobs_.begin(); job != jobs_.end();) {
      if (job->remaining > 0.5) {
        ++job;
        continue;
      }
      ended.push_back(std::move(job->done));
      job = jobs_.erase(job);
    }
    plan();
    for (auto& done : ended) done();
  });
}

}  // namespace troupe::sim
