// ZeRO stage 3 against a trainer whose layer sequence changes (tests/integration/
// schedule_rank.cpp): when every rank drops the same layers, the recorded fetch order
// is discarded and made again and training still matches plain single-process
// training; when ranks drop different layers, every rank stops with an error naming
// the step and the layers instead of hanging or gathering the wrong parameters.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

// Each launch coordinates on a free port of its own.
std::string launch(int ranks, int stage, const std::string& mode, const std::string& extra = "") {
  std::string program = std::string(SCHEDULE_RANK_BINARY) + " " + std::to_string(stage) + " " + mode + " " +
                        std::to_string(testing::free_port()) + extra;
  if (ranks == 1) return program;
  return std::string(TROUPE_BINARY) + " launch --ranks " + std::to_string(ranks) + " -- " + program;
}

TEST(LayerSchedule, StageThreeFollowsAChangedLayerOrderAndMatchesOneProcess) {
  auto alone = testing::run_command(launch(1, 0, "skip"), 120);
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  auto ranks = testing::run_command(launch(2, 3, "skip"), 120);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  auto expected = testing::printed_losses(alone.output), got = testing::printed_losses(ranks.output);
  ASSERT_EQ(expected.size(), 6u);
  ASSERT_EQ(got.size(), 6u);
  for (std::size_t s = 0; s < 6; ++s)
    EXPECT_NEAR(got[s], expected[s], 1e-5 * expected[s]) << "step " << s + 1;
  auto all_layers = testing::run_command(launch(1, 0, "all"), 120);
  ASSERT_EQ(all_layers.exit_code, 0) << all_layers.output;
  EXPECT_NE(testing::printed_losses(all_layers.output)[3], expected[3])
      << "dropping layers at step 3 must change training";
}

TEST(LayerSchedule, StageThreeRefusesRanksThatRunDifferentLayers) {
  auto r = testing::run_command(launch(2, 3, "diverge"), 120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 3, micro-batch 0: rank 1 runs layer 4 (4) where rank 0 runs layer 2 (2), at "
                          "position 2 of the forward pass"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("every rank must run the same layers in the same order"), std::string::npos)
      << r.output;
}

// Below stage 3 a rank may skip layers (their gradients are zero). With several gradient
// rows the skipping rank completes rows in another order; rows are still reduced in one
// order on every rank, so training goes on (and does not reduce mismatched rows).
TEST(LayerSchedule, BelowStageThreeRanksMaySkipDifferentLayers) {
  for (int stage : {0, 1, 2}) {
    auto r = testing::run_command(launch(2, stage, "diverge", " zero.reduce_bucket_size=300"), 120);
    EXPECT_EQ(r.exit_code, 0) << "stage " << stage << ": " << r.output;
  }
}

// One stage's bubble is its replicas' mean idle, as a pipeline's is and as `troupe
// simulate` reports it: rank 1 sleeps kSlowMs (100 ms) in every forward, rank 0 waits
// for it in the gradients' reduction. Rank 0's own idle fraction is then above 0.95; the
// mean of the two replicas is about a half (above once the step's own overhead grows).
TEST(LayerSchedule, ASlowReplicasStepGivesTheReplicasMeanBubble) {
  auto r = testing::run_command(launch(2, 1, "slow"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto bubbles = testing::printed_figures(r.output, "bubble");
  ASSERT_EQ(bubbles.size(), 6u) << r.output;
  for (std::size_t s = 1; s < bubbles.size(); ++s) {  // the first step also starts the ranks
    EXPECT_GT(bubbles[s], 0.35) << "step " << s + 1;
    EXPECT_LT(bubbles[s], 0.85) << "step " << s + 1;
  }
}

}  // namespace
}  // namespace troupe
