// What a stage's rank gives its replicas after each update (one row of kStepFields int64 per
// rank, all-gathered): its memory peaks by kind, its forward and backward time of the step
// in nanoseconds, with loss scaling the scale it used (a double's bits) and whether it
// skipped the step, and its device bytes (device_bytes_of).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.hpp"
#include "memory/memory_ledger.hpp"

namespace troupe::stage {

constexpr std::size_t kMemoryFields = memory_kind_count;  // by MemoryKind
constexpr std::size_t kBusyField = kMemoryFields;
constexpr std::size_t kScaleField = kMemoryFields + 1;
constexpr std::size_t kSkippedField = kMemoryFields + 2;
constexpr std::size_t kDeviceField = kMemoryFields + 3;
constexpr std::size_t kStepFields = kMemoryFields + 4;

/// The model state and communication buffers in the device's memory at their peaks
/// (what `troupe estimate` predicts as device_bytes; activations are reported apart).
int64_t device_bytes_of(const MemoryBytes& device_peak);

/// Writes the loss scale and skip of a step into a rank's row.
void put_scale(int64_t* row, double loss_scale, bool skipped);

/// Loss scaling decides from the group's global norm, so every replica scales and skips
/// alike; one that did not would train another model. `figures` holds `replicas` rows;
/// an error names the first replica whose scale or skip differs from replica `self`'s.
Status check_replicas_scaled_alike(const int64_t* figures, int64_t replicas, int64_t self, int64_t step);

}  // namespace troupe::stage
