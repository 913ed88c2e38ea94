// The simulated executor: runs every stage's program (action.hpp) on a model of the
// pipeline, with no model, no threads and no clock, and checks it before it trains:
//   - every micro-batch has exactly one forward and one backward on every stage, the
//     forward first, each with the messages it needs (an activation from the previous
//     stage, a gradient from the next) received before it and sent after it;
//   - it ends: each step of time every stage runs what it can; when no stage can move
//     and some have actions left, that is a deadlock, and the error names each stuck
//     stage and the action it waits at;
//   - it measures: time slots to the end (forward and backward one slot each; a message
//     sent when a slot ends can be received at that instant; other actions take no time) and the most
//     micro-batches whose activations each stage holds at once (forward run, backward not).
// Sends are bounded by credits: at most `credits` messages per neighbour and direction
// that the receiver has not taken yet, as the stage actors' receive buffers are.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"

namespace troupe::pipeline {

/// One compute action as the executor placed it in time.
struct TimedAction {
  Action action;
  int64_t start = 0;  ///< its slot; it ends one slot later
};

struct Simulation {
  int64_t slots = 0;                      ///< time to the end, forward = backward = 1
  std::vector<std::vector<TimedAction>> timeline;  ///< by stage: its forwards and backwards, in order
  std::vector<int64_t> busy_slots;        ///< by stage: slots spent computing
  std::vector<int64_t> peak_activations;  ///< by stage: micro-batches held at once, at most
  /// Idle fraction of the pipeline: 1 − Σ busy / (stages × slots) (bubble/total).
  double bubble() const;
};

/// Checks and runs `programs` (stage 0 first) for `micro_batches` micro-batches.
Result<Simulation> simulate(const std::vector<Program>& programs, int64_t micro_batches, int64_t credits = 2);

}  // namespace troupe::pipeline
