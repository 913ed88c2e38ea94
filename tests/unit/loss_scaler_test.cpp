// The loss scaler against DeepSpeed's: for patterns of overflowing steps, the scale after
// each step and which steps are skipped, worked out by hand from DeepSpeed's
// DynamicLossScaler.update_scale (ZeRO 1-3) and FP16_Optimizer._update_scale (stage 0): an
// overflow spends hysteresis before it halves the scale, the window counts clean steps
// from the last overflow (from iteration -1 at first), an increase refills the hysteresis,
// and at the minimum scale ZeRO's scaler stops the run while stage 0's stays there.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "optim/loss_scaler.hpp"

namespace troupe {
namespace {

// The scale after each step of `overflows` (1: the step overflowed).
std::vector<double> scales(const LossScaleOptions& options, const std::vector<int>& overflows) {
  auto scaler = LossScaler::make(options);
  EXPECT_TRUE(scaler.ok()) << scaler.error().message;
  std::vector<double> out;
  for (int overflow : overflows) {
    auto updated = scaler->update(overflow != 0);
    EXPECT_TRUE(updated.ok()) << updated.error().message;
    out.push_back(scaler->scale());
  }
  return out;
}

LossScaleOptions dynamic(int64_t power, int64_t window, int64_t hysteresis) {
  LossScaleOptions o;
  o.initial_scale_power = power;
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  return o;
}

TEST(LossScaler, DoublesAfterAWindowOfCleanStepsCountedFromIterationMinusOne) {
  // No overflow: the stable interval at iteration i is i, so the scale doubles after
  // iterations 3, 6, 9 with a window of 3.
  EXPECT_EQ(scales(dynamic(4, 3, 2), {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
            (std::vector<double>{16, 16, 16, 32, 32, 32, 64, 64, 64, 128}));
  auto first = LossScaler::make(dynamic(16, 1000, 2));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->scale(), 65536.0) << "2^initial_scale_power";
}

TEST(LossScaler, TheFirstOverflowSpendsHysteresisAndLaterOnesHalveUntilAnIncreaseRefillsIt) {
  // Window 4, hysteresis 2: the overflow at 4 spends hysteresis (scale kept, step skipped);
  // clean steps 5-8 make the stable interval 4 at iteration 9, which doubles and refills;
  // then 10 spends it again and 11 halves.
  EXPECT_EQ(scales(dynamic(4, 4, 2), {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1}),
            (std::vector<double>{16, 16, 16, 16, 16, 16, 16, 16, 16, 32, 32, 16}));
  // Without consecutive hysteresis a clean step does not refill it: every overflow after
  // the first halves.
  EXPECT_EQ(scales(dynamic(4, 100, 2), {1, 0, 1, 0, 1, 1}), (std::vector<double>{16, 16, 8, 8, 4, 2}));
  // Hysteresis 1: every overflow halves.
  EXPECT_EQ(scales(dynamic(4, 100, 1), {1, 1, 0, 1}), (std::vector<double>{8, 4, 4, 2}));
}

TEST(LossScaler, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  LossScaleOptions o = dynamic(4, 100, 2);
  o.consecutive_hysteresis = true;
  EXPECT_EQ(scales(o, {1, 0, 1, 0, 1, 1}), (std::vector<double>{16, 16, 16, 16, 16, 8}));
  // Hysteresis 3: two overflows in a row are absorbed, the third halves.
  o.hysteresis = 3;
  EXPECT_EQ(scales(o, {1, 1, 0, 1, 1, 1}), (std::vector<double>{16, 16, 16, 16, 16, 8}));
}

TEST(LossScaler, TheWindowRestartsAtEachOverflow) {
  // Window 2: the overflow at 1 (hysteresis 1) halves; the stable interval is then 0 at
  // iteration 2, 1 at 3 and 2 at 4, which doubles.
  EXPECT_EQ(scales(dynamic(3, 2, 1), {0, 1, 0, 0, 0, 0, 0}), (std::vector<double>{8, 4, 4, 4, 8, 8, 16}));
}

TEST(LossScaler, AtTheMinimumZerosScalerStopsWithDeepSpeedsErrorAndStageZerosStaysThere) {
  LossScaleOptions o = dynamic(1, 100, 1);  // scale 2, minimum 1
  auto zero = LossScaler::make(o);
  ASSERT_TRUE(zero.ok());
  ASSERT_TRUE(zero->update(true).ok());
  EXPECT_EQ(zero->scale(), 1.0);
  auto stopped = zero->update(true);
  ASSERT_FALSE(stopped.ok());
  EXPECT_NE(stopped.error().message.find("Current loss scale already at minimum"), std::string::npos)
      << stopped.error().message;

  o.error_at_min_scale = false;  // FP16_Optimizer (ZeRO stage 0)
  EXPECT_EQ(scales(o, {1, 1, 1, 0}), (std::vector<double>{1, 1, 1, 1}));
  o.min_loss_scale = 0.25;  // halving stops at the minimum, not below
  o.initial_scale_power = 0;
  EXPECT_EQ(scales(o, {1, 1, 1}), (std::vector<double>{0.5, 0.25, 0.25}));
}

TEST(LossScaler, AStaticScaleNeverChanges) {
  LossScaleOptions o;
  o.loss_scale = 128;
  auto scaler = LossScaler::make(o);
  ASSERT_TRUE(scaler.ok());
  EXPECT_FALSE(scaler->dynamic());
  for (bool overflow : {true, false, true, true})
    ASSERT_TRUE(scaler->update(overflow).ok()) << "a static scale never stops the run";
  EXPECT_EQ(scaler->scale(), 128.0);
  EXPECT_EQ(scaler->iteration(), 4);
}

TEST(LossScaler, BadOptionsNameTheKey) {
  auto refused = [](LossScaleOptions o, const std::string& key) {
    auto made = LossScaler::make(o);
    ASSERT_FALSE(made.ok()) << key;
    EXPECT_NE(made.error().message.find(key), std::string::npos) << made.error().message;
  };
  LossScaleOptions o;
  o.loss_scale = -1;
  refused(o, "loss_scale = -1");
  o.loss_scale = std::numeric_limits<double>::infinity();
  refused(o, "loss_scale");
  o = LossScaleOptions{};
  o.loss_scale_window = 0;
  refused(o, "loss_scale_window");
  o = LossScaleOptions{};
  o.min_loss_scale = 0;
  refused(o, "min_loss_scale");
  o = LossScaleOptions{};
  o.hysteresis = 0;
  refused(o, "hysteresis");
  o = LossScaleOptions{};
  o.loss_scale = 8;
  o.loss_scale_window = 0;  // only a dynamic scale is checked for these, as DeepSpeed does
  EXPECT_TRUE(LossScaler::make(o).ok());
}

}  // namespace
}  // namespace troupe
