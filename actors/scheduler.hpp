// The scheduler actor: runs one training step at a time by walking this rank's
// program (pipeline/action.hpp), handing each action to the stage actor of its chunk (one
// per model chunk the rank holds: one, or v with virtual stages) in order, at most
// `window` of them unfinished at once. It fetches the micro-batches of the program's
// loads from the data loader ahead of use and hands each to the chunk with its load
// action. reduce_gradients and optimizer_step go to every chunk: in a pipeline each chunk
// answers reduce_gradients with its share of the step's loss, gradient square sum, tokens
// and compute time; the scheduler sums them over its chunks, gathers every rank's over
// the world and sums them in rank order (the same numbers on every rank), and tells every
// chunk the global norm (gradients_summed), which their optimizer steps wait for. The
// last chunk's step_applied ends the step. Chunks share the rank's compute stream under
// ZeRO 0-1: a chunk gets its next compute action only once the one before it is on the
// stream (compute_started), so the stream runs them in program order, as the schedule
// planned, not in the order their inputs happened to arrive.
//
// Event-driven (an EventScheduler, pipeline/events.hpp, named by [pipeline] schedule):
// there is no program to walk; the rank's scheduler hears each action that finishes and
// chooses the next compute action whenever fewer than two are chosen and unfinished, and
// this actor adds the loads, receives, sends and the step's end around its choices. A
// choice that is not ready, or choosing nothing when nothing more can come, fails the step
// with an error naming the scheduler, what was ready and what it waited for.
//
// A validation batch (eval_step, between steps) walks eval_program the same way, its
// actions marked eval; then every chunk's loss sum and count are gathered over the world and
// summed in rank order, so every rank answers the same mean.
//
// Protocol (actors/protocol/scheduler.hpp): train_step → step_report (error set on failure);
// eval_step → eval_report;
// finish_training → collective_done once every rank has finished.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/trace.hpp"
#include "memory/memory_ledger.hpp"
#include "pipeline/action.hpp"
#include "pipeline/events.hpp"
#include "pipeline/layout.hpp"

namespace troupe {

struct SchedulerOptions {
  std::vector<caf::actor> chunks;  ///< the rank's stage actors, by chunk
  caf::actor data_loader;
  caf::actor comm_agent;
  pipeline::Program program;  ///< this rank's actions for one step
  /// This rank's actions for one validation batch: the program's loads, receives and sends
  /// of activations and forwards, in its order (eval_step; empty: no validation).
  pipeline::Program eval_program;
  int64_t micro_count = 1;    ///< gradient accumulation steps: the program's micro-batches
  int64_t stages = 1;         ///< pp, for the step's bubble; above 1 the summary is gathered
  int64_t world_rank = 0;
  int64_t world_size = 1;
  int64_t window = 8;         ///< actions handed to the stage and not finished, at most
  double fetch_timeout_s = 60;
  Tracer* tracer = nullptr;
  // Event-driven only: the rank's scheduler (it lives for every step) and what it needs.
  std::shared_ptr<pipeline::EventScheduler> policy;
  std::string policy_name;
  pipeline::Layout layout;  ///< where the pipeline's chunks sit
  int64_t stage = 0;        ///< this rank's stage in its pipeline
  bool split_backward = false;
  std::shared_ptr<MemoryLedger> ledger;  ///< the activation bytes its limit is checked against
  /// What the step's time is read from: empty for the steady clock; `troupe simulate`'s
  /// virtual clock, under which this same actor runs a simulated cluster.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

caf::actor spawn_scheduler(caf::actor_system& system, SchedulerOptions options);

}  // namespace troupe
