// The simulated executor: runs every rank's program (action.hpp) on a model of the
// pipeline, with no model, no threads and no clock, and checks it before it trains:
//   - every micro-batch has, on every chunk of every rank, one forward and one backward
//     (whole, or its input half then its weight half), the forward first, each with the
//     messages it needs (an activation from the previous virtual stage, a gradient from the
//     next) received before it and sent after it;
//   - it ends: each instant every rank runs what it can; when no rank can move and some
//     have actions left, that is a deadlock, and the error names each stuck rank, the
//     action it waits at and whom it waits for;
//   - it measures: time to the end at the given costs (a message sent when a compute action
//     ends can be received at that instant; other actions take no time) and the most chunk
//     micro-batches each rank holds at once (forward run, whole or weight-half backward not).
// Sends are bounded by credits: at most `credits` messages per virtual stage and direction
// that the receiver has not taken yet, as the stage actors' receive buffers are.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/layout.hpp"

namespace troupe::pipeline {

/// What each compute action costs, in slots; a whole backward costs both halves.
struct Costs {
  int64_t forward = 1;
  int64_t backward_input = 1;
  int64_t backward_weight = 1;
  int64_t of(Op op) const;
};

/// One compute action as the executor placed it in time.
struct TimedAction {
  Action action;
  int64_t start = 0;     ///< its first slot
  int64_t duration = 1;  ///< slots it takes
};

struct Simulation {
  int64_t slots = 0;                               ///< time to the end
  int64_t chunks = 1;                              ///< per rank
  std::vector<std::vector<TimedAction>> timeline;  ///< by rank: its compute actions, in order
  std::vector<int64_t> busy_slots;                 ///< by rank: slots spent computing
  std::vector<int64_t> peak_activations;           ///< by rank: chunk micro-batches held at once, at most
  /// Idle fraction of the pipeline: 1 − Σ busy / (ranks × slots) (bubble/total).
  double bubble() const;
  /// The most any rank holds, in micro-batches of a whole stage (a chunk is 1/chunks of one).
  double peak_stage_activations() const;
};

/// Checks and runs `programs` (rank 0 first; layout.ranks of them) for `micro_batches`.
Result<Simulation> simulate(const std::vector<Program>& programs, const Layout& layout, int64_t micro_batches,
                            int64_t credits = 2, const Costs& costs = {});

/// One chunk per rank: stage r is rank r.
Result<Simulation> simulate(const std::vector<Program>& programs, int64_t micro_batches, int64_t credits = 2,
                            const Costs& costs = {});

}  // namespace troupe::pipeline
