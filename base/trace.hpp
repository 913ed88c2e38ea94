// Tracer: records spans (what ran, on which track, from when to when) for one rank,
// and writes them as Chrome-trace / Perfetto JSON events: one process per rank,
// one thread track per actor and stream. runtime/trace_merge.hpp merges the ranks.
//
// Thread safety: span() and Scope may be used from any thread at once.
// A null Tracer* everywhere means tracing is off; Scope then costs a branch.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.hpp"

namespace troupe {

class Tracer {
 public:
  explicit Tracer(int64_t rank) : rank_(rank) {}

  /// Microseconds on the clock every rank of this host shares.
  static int64_t now_us();

  /// Records one finished span on `track` (e.g. "stage", "stream compute").
  void span(std::string_view track, std::string_view name, int64_t start_us, int64_t end_us);

  /// Records a span from construction to destruction; a no-op when tracer is null.
  class Scope {
   public:
    Scope(Tracer* tracer, std::string_view track, std::string_view name)
        : tracer_(tracer), track_(track), name_(name), start_us_(tracer ? now_us() : 0) {
      if (tracer_ != nullptr) tracer_->open_.fetch_add(1, std::memory_order_relaxed);
    }
    ~Scope() {
      if (tracer_ == nullptr) return;
      tracer_->span(track_, name_, start_us_, now_us());
      tracer_->open_.fetch_sub(1, std::memory_order_release);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Tracer* tracer_;
    std::string_view track_;
    std::string_view name_;
    int64_t start_us_;
  };

  /// Waits, at most `bound`, until no Scope is open. A stream's work item can answer (and
  /// its step end) before the span around it is recorded: a thread descheduled between
  /// the two would leave the last span out of a trace written at once.
  void settle(std::chrono::milliseconds bound) const;

  /// Writes this rank's events as a JSON array to `path`.
  Status write(const std::string& path) const;
  std::size_t size() const;

 private:
  struct Event {
    int64_t track;
    std::string name;
    int64_t start_us;
    int64_t duration_us;
  };
  /// Events kept at most; past it spans are counted, not stored (a bound on memory).
  static constexpr std::size_t events_max = 1 << 20;

  int64_t rank_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, int64_t> tracks_;
  std::vector<Event> events_;
  std::size_t dropped_ = 0;
  std::atomic<int64_t> open_{0};  // Scopes begun and not yet recorded
};

}  // namespace troupe
