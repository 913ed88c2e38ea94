#include "actors/stage/step_figures.hpp"

#include <cstring>

#include <fmt/format.h>

namespace troupe::stage {
namespace {

const int64_t* row_of(const int64_t* figures, int64_t replica) {
  return figures + replica * static_cast<int64_t>(kStepFields);
}

std::string scale_of(const int64_t* row) {
  double scale = 0;
  std::memcpy(&scale, &row[kScaleField], sizeof(double));
  return fmt::format("loss scale {:g}{}", scale, row[kSkippedField] ? " and skipped" : "");
}

}  // namespace

int64_t device_bytes_of(const MemoryBytes& device_peak) {
  return device_peak.model_state() + device_peak[MemoryKind::communication];
}

void put_scale(int64_t* row, double loss_scale, bool skipped) {
  std::memcpy(&row[kScaleField], &loss_scale, sizeof(double));
  row[kSkippedField] = skipped ? 1 : 0;
}

Status check_replicas_scaled_alike(const int64_t* figures, int64_t replicas, int64_t self, int64_t step) {
  const int64_t* mine = row_of(figures, self);
  for (int64_t r = 0; r < replicas; ++r) {
    const int64_t* theirs = row_of(figures, r);
    if (theirs[kScaleField] != mine[kScaleField] || theirs[kSkippedField] != mine[kSkippedField])
      return make_error(fmt::format("step {}: replica {} of this stage used {}, replica {} {}", step, r,
                                    scale_of(theirs), self, scale_of(mine)));
  }
  return {};
}

}  // namespace troupe::stage
