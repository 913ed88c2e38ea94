// A list scheduler: places every compute action of a pipeline step at unit costs (each
// forward, input half and weight half of a backward takes one slot) by running the
// pipeline in time and letting each idle rank take the most urgent action it can:
//   1. an input-gradient backward whose gradient has arrived (the previous stage waits
//      for it), the oldest micro-batch first;
//   2. a forward whose input has arrived, while the rank holds fewer than `memory_limit`
//      chunk micro-batches (forward run, weight half not yet), the deepest chunk first, so
//      the loss and the backwards start early;
//   3. the oldest weight-gradient backward, which nothing waits for and which frees memory.
// It never idles a rank that has something it may run, which is what fills the bubbles of
// the zero-bubble schedules (zbv is this over a V layout when m < 2p − 1, too few
// micro-batches for ZB-V's own order).
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/action.hpp"
#include "pipeline/layout.hpp"

namespace troupe::pipeline {

/// Each rank's compute actions in the order the list scheduler ran them, rank 0 first.
std::vector<std::vector<Action>> list_schedule(const Layout& layout, int64_t micro_batches,
                                               int64_t memory_limit);

}  // namespace troupe::pipeline
