// The data loader actor: prepares this rank's micro-batches on its own stream, ahead of
// use, so compute never waits for data. Micro-batch `micro` of step `step` on rank r
// holds global samples first = step × global + (micro × dp + r) × micro_batch_size, so
// the ranks together cover each global batch exactly once whatever dp is.
// Protocol (actors/protocol/data.hpp): fetch_micro_batch → micro_batch_ready.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

#include "actors/micro_batch.hpp"
#include "base/trace.hpp"

namespace troupe {

struct DataLoaderOptions {
  MicroBatchSource source;
  int64_t micro_batch_size = 1;
  int64_t micro_count = 1;  ///< gradient accumulation steps
  int64_t dp = 1;
  int64_t rank = 0;
  int64_t prefetch = 2;  ///< micro-batches prepared ahead of the one asked for
  Tracer* tracer = nullptr;
};

/// First global sample of a micro-batch (see the header comment).
int64_t first_sample_of(const DataLoaderOptions& o, int64_t step, int64_t micro);

caf::actor spawn_data_loader(caf::actor_system& system, DataLoaderOptions options);

}  // namespace troupe
