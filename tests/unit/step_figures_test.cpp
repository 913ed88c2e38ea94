// The step figures a stage's replicas exchange after each update: the loss scale and skip
// of every replica must agree, and a row that does not is named (actors/stage/step_figures.hpp).
#include <gtest/gtest.h>

#include <vector>

#include "actors/stage/step_figures.hpp"

namespace troupe::stage {
namespace {

std::vector<int64_t> rows(int64_t replicas) {
  return std::vector<int64_t>(static_cast<std::size_t>(replicas) * kStepFields, 0);
}

int64_t* row(std::vector<int64_t>& figures, int64_t replica) {
  return figures.data() + replica * static_cast<int64_t>(kStepFields);
}

TEST(StepFigures, ReplicasThatScaledAndSkippedAlikePass) {
  auto figures = rows(3);
  for (int64_t r = 0; r < 3; ++r) put_scale(row(figures, r), 65536, true);
  for (int64_t self = 0; self < 3; ++self)
    EXPECT_TRUE(check_replicas_scaled_alike(figures.data(), 3, self, 7).ok());
}

TEST(StepFigures, AReplicaWithAnotherScaleOrSkipIsNamed) {
  auto figures = rows(3);
  for (int64_t r = 0; r < 3; ++r) put_scale(row(figures, r), 65536, false);
  put_scale(row(figures, 2), 32768, false);
  Status scaled = check_replicas_scaled_alike(figures.data(), 3, 0, 7);
  ASSERT_FALSE(scaled.ok());
  EXPECT_EQ(scaled.error().message,
            "step 7: replica 2 of this stage used loss scale 32768, replica 0 loss scale 65536");

  put_scale(row(figures, 2), 65536, false);
  put_scale(row(figures, 1), 65536, true);
  Status skipped = check_replicas_scaled_alike(figures.data(), 3, 2, 9);
  ASSERT_FALSE(skipped.ok());
  EXPECT_EQ(skipped.error().message,
            "step 9: replica 1 of this stage used loss scale 65536 and skipped, replica 2 loss scale 65536");
}

}  // namespace
}  // namespace troupe::stage
