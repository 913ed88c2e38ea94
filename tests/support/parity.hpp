// The parity check every parallel feature is held to: a troupe run against the single-
// process reference on the same global batches.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "tests/support/trained_run.hpp"

namespace troupe::testing {

struct ParityFigures {
  double loss = 0;        ///< worst relative loss difference over the steps
  double grad_norm = 0;   ///< worst relative gradient-norm difference
  double parameters = 0;  ///< final parameters' distance, relative to their norm
};

/// Expects `run` to match `ref` for `steps` steps: losses within 1e-5 relative, gradient
/// norms within 1e-4, final parameters within 1e-5 of their norm; the reference's loss to
/// fall; and, with clipping at `clip` > 0, the threshold to bind in most steps (else the
/// test would not test clipping). Returns the worst figures, for the printed line.
inline ParityFigures expect_parity(const TrainedRun& run, const TrainedRun& ref, std::size_t steps,
                                   double clip = 0) {
  ParityFigures worst;
  EXPECT_EQ(ref.losses.size(), steps);
  EXPECT_EQ(run.losses.size(), steps);
  if (ref.losses.size() != steps || run.losses.size() != steps) return worst;
  for (std::size_t s = 0; s < steps; ++s) {
    EXPECT_NEAR(run.losses[s], ref.losses[s], 1e-5 * std::abs(ref.losses[s])) << "step " << s + 1;
    EXPECT_NEAR(run.grad_norms[s], ref.grad_norms[s], 1e-4 * ref.grad_norms[s]) << "step " << s + 1;
    worst.loss = std::max(worst.loss, std::abs(run.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]));
    worst.grad_norm =
        std::max(worst.grad_norm, std::abs(run.grad_norms[s] - ref.grad_norms[s]) / ref.grad_norms[s]);
  }
  EXPECT_LT(ref.losses.back(), ref.losses.front());
  if (clip > 0) {
    int clipped = 0;
    for (double n : ref.grad_norms) clipped += n > clip;
    EXPECT_GT(clipped, static_cast<int>(steps / 2)) << "the clip threshold must bind in most steps to test clipping";
  }
  EXPECT_EQ(run.parameters.size(), ref.parameters.size());
  EXPECT_FALSE(ref.parameters.empty());
  worst.parameters = parameter_distance(run.parameters, ref.parameters);
  EXPECT_LT(worst.parameters, 1e-5);
  return worst;
}

}  // namespace troupe::testing
