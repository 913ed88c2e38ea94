// FetchPlanner: which parameter rows ZeRO stage 3 gathers, prefetches and frees, and
// when. It decides; the stage's parameter fetcher carries the decisions out.
//
// A pass is one micro-batch's forward and backward, or, where a pipeline runs other
// micro-batches between the two, one forward or one backward: each kind of pass keeps
// its own trace, so forwards replay forwards and backwards backwards while the rows
// held stay one set. Every use of a row is an
// acquire (the row must be gathered now) followed later by a release (this use is
// over). The first pass records the order of acquires (the trace); later passes
// replay it to gather ahead: after acquiring trace position i, rows at positions
// i+1, i+2, ... are prefetched while their elements fit in
// min(prefetch_bucket_size, max_live_parameters - held), DeepSpeed's rule. A release
// keeps a row whose next use in the trace is at most max_reuse_distance elements of
// other rows away; persistent rows are never freed. An acquire that departs from the
// trace discards it (no prefetch for the rest of the pass) and the next pass records
// afresh.
//
// Deterministic: equal calls give equal decisions on every rank, so every rank issues
// the same gathers in the same order. Pure bookkeeping, no memory, no threads.
// Thread safety: one owner (the compute thread of the stage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe {

class FetchPlanner {
 public:
  struct Limits {
    std::size_t prefetch_bucket_size = 50000000;
    std::size_t max_live_parameters = 1000000000;
    std::size_t max_reuse_distance = 1000000000;
  };
  enum class Mode { invalid, record, complete };

  /// Rows of `row_sizes` elements; persistent rows count as held from the start.
  FetchPlanner(std::vector<std::size_t> row_sizes, std::vector<bool> persistent, Limits limits);

  /// A new pass of kind `kind` begins (kinds are small numbers the caller chooses): the
  /// kind's recorded trace becomes the one replayed; a discarded one is recorded again.
  void begin_pass(std::size_t kind = 0);
  /// `row` is needed now. Returns the rows to gather now, in order: `row` itself unless
  /// it is held already, then prefetches.
  std::vector<std::size_t> acquire(std::size_t row);
  /// This use of `row` is over; true when the row should be freed now.
  bool release(std::size_t row);
  /// The pass is over: the rows still held that are not persistent, now freed.
  std::vector<std::size_t> end_pass();

  Mode mode() const { return current().mode; }
  bool held(std::size_t row) const { return held_[row]; }
  /// Elements of the rows held (gathered or being gathered), now and at most since made.
  std::size_t held_elements() const { return held_elements_; }
  std::size_t peak_held_elements() const { return peak_held_elements_; }
  /// How many times a pass departed from the recorded trace.
  int64_t invalidations() const { return invalidations_; }
  const std::vector<std::size_t>& trace() const { return current().trace; }

 private:
  struct Recording {
    Mode mode = Mode::invalid;
    std::vector<std::size_t> trace;
  };
  Recording& current() { return recordings_[kind_]; }
  const Recording& current() const { return recordings_[kind_]; }

  void hold(std::size_t row);
  void drop(std::size_t row);
  void prefetch_after(std::size_t position, std::vector<std::size_t>& out);
  bool reused_soon(std::size_t row) const;

  std::vector<std::size_t> sizes_;
  std::vector<bool> persistent_;
  Limits limits_;
  std::vector<Recording> recordings_{1};  // by kind of pass
  std::size_t kind_ = 0;                  // of the pass under way
  std::size_t position_ = 0;              // acquires so far in this pass
  std::vector<std::size_t> acquired_at_;  // by row: position of its latest acquire
  std::vector<bool> held_;
  std::size_t held_elements_ = 0;
  std::size_t peak_held_elements_ = 0;
  int64_t invalidations_ = 0;
};

}  // namespace troupe
