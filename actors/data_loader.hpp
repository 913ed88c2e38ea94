// The data loader actor: prepares this rank's micro-batches on its own stream, ahead of
// use, so compute never waits for data. Micro-batch `micro` of step `step` on rank r
// holds global samples first = step × global + (micro × dp + r) × micro_batch_size, so
// the ranks together cover each global batch exactly once whatever dp is. Validation
// batches come the same way from `validation` (batch b of a pass as step b), each pass from
// its first batch again.
// Protocol (actors/protocol/data.hpp): fetch_micro_batch → micro_batch_ready.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

#include "actors/micro_batch.hpp"
#include "actors/protocol/data.hpp"
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
  MicroBatchSource validation;  ///< empty: the job has no validation split
  /// Step s's first training sample is start.samples_after(s, global batch); a resume moves
  /// it (the data_position message).
  data_position start{};
};

/// First global sample of a micro-batch (see the header comment); a validation batch's
/// count from 0 whatever the training position.
int64_t first_sample_of(const DataLoaderOptions& o, int64_t step, int64_t micro, bool validation = false);

caf::actor spawn_data_loader(caf::actor_system& system, DataLoaderOptions options);

}  // namespace troupe
