// A thread that keeps one core busy for as long as it lives: what a training rank's compute
// thread does to the host's cores, for the benchmarks that measure communication beside it.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace troupe {

class BusyCore {
 public:
  BusyCore()
      : spinner_([this] {
          volatile uint64_t work = 0;
          while (!done_.load(std::memory_order_relaxed)) work = work + 1;
        }) {}
  ~BusyCore() {
    done_ = true;
    spinner_.join();
  }
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;

 private:
  std::atomic<bool> done_{false};  // before spinner_: set before the thread starts reading it
  std::thread spinner_;
};

}  // namespace troupe
