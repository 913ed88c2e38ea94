// An EventScheduler's plan: its schedulers, one per rank, run one step on a model of the
// pipeline at the simulated executor's costs (a forward, an input half and a weight half
// one slot each; a message arrives when the compute that makes it ends), and what each
// rank chose, in order, is its compute actions. That is what `troupe schedule show` draws
// and what the job's check runs before training; at run time the same schedulers decide
// again from the real events, so the order may differ where real costs do.
// A scheduler that chooses an action that is not ready, or with which no rank can move
// while some have actions left, is an error naming it, each stuck rank, what is ready
// there and what it waits for.
// Thread safety: pure function (it makes its own schedulers).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "pipeline/events.hpp"
#include "pipeline/layout.hpp"
#include "pipeline/simulate.hpp"

namespace troupe::pipeline {

/// Each rank's compute actions in the order `name`'s schedulers chose them, rank 0 first.
Result<std::vector<std::vector<Action>>> plan_events(std::string_view name, const EventSchedulerFactory& make,
                                                     const Layout& layout, int64_t micro_batches, bool split,
                                                     const Costs& costs = {});

}  // namespace troupe::pipeline
