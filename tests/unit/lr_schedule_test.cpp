// DeepSpeed's learning-rate schedules: the rate at iterations worked out from its
// lr_schedules.py formulas (iteration −1 is the value as constructed, which the first
// update uses), its defaults and its refusals.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "optim/lr_schedule.hpp"

namespace troupe {
namespace {

LrSchedule made(const LrScheduleOptions& o, double optimizer_lr = 0.01, bool betas = true) {
  auto s = LrSchedule::make(o, optimizer_lr, betas);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return *s;
}

void expect_rates(const LrSchedule& s, const std::vector<std::pair<int64_t, double>>& rates) {
  for (const auto& [it, lr] : rates) EXPECT_NEAR(*s.at(it).lr, lr, 1e-9 + 1e-7 * lr) << "iteration " << it;
}

TEST(LrSchedule, WarmupLrRisesLogarithmicallyOrLinearlyThenHolds) {
  LrScheduleOptions o;
  o.type = LrScheduleType::warmup_lr;
  o.warmup_max_lr = 0.01;
  o.warmup_num_steps = 10;
  o.warmup_type = WarmupType::linear;
  expect_rates(made(o), {{-1, 0}, {0, 0}, {1, 0.001}, {5, 0.005}, {9, 0.009}, {10, 0.01}, {50, 0.01}});
  o.warmup_type = WarmupType::log;
  expect_rates(made(o), {{0, 0}, {1, 0.0030103}, {4, 0.0069897}, {9, 0.01}, {10, 0.01}});
  o.warmup_min_lr = 0.001;
  expect_rates(made(o), {{1, 0.00370927}});
  o.warmup_min_lr = 0;
  o.warmup_num_steps = 1;  // raised to 2
  expect_rates(made(o), {{0, 0}, {1, 0.01}});
  o.warmup_type = WarmupType::linear;
  expect_rates(made(o), {{0, 0}, {1, 0.005}, {2, 0.01}});
  o.warmup_max_lr.reset();  // WarmupLR's maximum defaults to the optimizer's rate
  expect_rates(made(o, 0.02), {{5, 0.02}});
}

TEST(LrSchedule, WarmupDecayLrFallsLinearlyToItsMinimumAtTotalNumSteps) {
  LrScheduleOptions o;
  o.type = LrScheduleType::warmup_decay_lr;
  o.warmup_max_lr = 0.01;
  o.warmup_num_steps = 10;
  o.total_num_steps = 100;
  o.warmup_type = WarmupType::linear;
  expect_rates(made(o), {{9, 0.009}, {10, 0.01}, {55, 0.005}, {99, 0.01 / 90}, {100, 0}, {150, 0}});
  o.warmup_min_lr = 0.001;
  o.warmup_type = WarmupType::log;
  expect_rates(
      made(o),
      {{0, 0.001}, {1, 0.00370927}, {9, 0.01}, {10, 0.01}, {55, 0.0055}, {100, 0.001}, {150, 0.001}});
  o.warmup_max_lr.reset();  // WarmupDecayLR's maximum defaults to 0.001, not the optimizer's rate
  o.warmup_min_lr = 0;
  expect_rates(made(o, 0.5), {{10, 0.001}});
  // total_num_steps below the warm-up: DeepSpeed only warns, and the rate drops to its floor.
  o = LrScheduleOptions{};
  o.type = LrScheduleType::warmup_decay_lr;
  o.warmup_max_lr = 0.01;
  o.warmup_num_steps = 10;
  o.total_num_steps = 5;
  o.warmup_type = WarmupType::linear;
  std::vector<std::string> warnings;
  auto s = LrSchedule::make(o, 0.01, true, &warnings);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("total_num_steps = 5 is less than warmup_num_steps = 10"), std::string::npos);
  expect_rates(*s, {{9, 0.009}, {10, 0}});
}

TEST(LrSchedule, WarmupCosineLrScalesTheOptimizersRateAndReachesItsFloorAtTheLastStep) {
  LrScheduleOptions o;
  o.type = LrScheduleType::warmup_cosine_lr;
  o.warmup_num_steps = 10;
  o.total_num_steps = 110;
  o.warmup_min_ratio = 0.1;
  o.cos_min_ratio = 0.01;
  o.warmup_type = WarmupType::linear;
  expect_rates(made(o, 0.01), {{-1, 0},
                               {0, 0.001},
                               {5, 0.0055},
                               {9, 0.0091},
                               {10, 0.0099975575},
                               {59, 0.00505},
                               {109, 0.0001},
                               {110, 0.0001},
                               {200, 0.0001}});
  o.warmup_type = WarmupType::log;
  expect_rates(made(o, 0.01), {{0, 0.001}, {1, 0.00370927}, {9, 0.01}});
  LrScheduleOptions defaults;  // warmup_min_ratio 0, cos_min_ratio 1e-4, W 1000, log
  defaults.type = LrScheduleType::warmup_cosine_lr;
  defaults.total_num_steps = 10000;
  expect_rates(made(defaults, 0.001),
               {{0, 0}, {1, 0.000100343332}, {999, 0.001}, {5499, 0.00050005}, {9999, 1e-7}});
}

TEST(LrSchedule, OneCycleRisesFallsAndDecaysWithBetaOneTheOtherWay) {
  LrScheduleOptions o;
  o.type = LrScheduleType::one_cycle;
  o.cycle_min_lr = 0.001;
  o.cycle_max_lr = 0.01;
  o.cycle_first_step_size = 8;
  const LrSchedule s = made(o);
  const std::vector<std::tuple<int64_t, double, double>> points = {
      {0, 0.002125, 0.8875}, {1, 0.00325, 0.875},   {6, 0.008875, 0.8125},
      {7, 0.01, 0.8},        {8, 0.008875, 0.8125}, {14, 0.002125, 0.8875},
      {15, 0.001, 0.9},      {16, 0.001, 0.9},      {40, 0.001, 0.9}};
  for (const auto& [it, lr, beta1] : points) {
    UpdateHyper h = s.at(it);
    EXPECT_NEAR(*h.lr, lr, 1e-9) << it;
    ASSERT_TRUE(h.beta1 && h.beta2);
    EXPECT_NEAR(*h.beta1, beta1, 1e-9) << it;
    EXPECT_EQ(*h.beta2, 0.99) << "OneCycle holds beta2 at 0.99";
  }
  EXPECT_EQ(*s.at(-1).lr, 0.001);
  EXPECT_NEAR(*s.at(-1).beta1, 0.8, 1e-12) << "constructed with both at their minimum";
  EXPECT_EQ(s.for_update(0).lr, s.at(-1).lr) << "the first update runs at the constructed value";

  o.cycle_first_stair_count = 4;  // the second defaults to the first
  expect_rates(made(o), {{0, 0.001},
                         {1, 0.00325},
                         {2, 0.00325},
                         {7, 0.01},
                         {8, 0.00775},
                         {9, 0.00775},
                         {14, 0.001},
                         {15, 0.001}});
  o.cycle_first_stair_count = 0;
  o.cycle_first_step_size = 4;
  o.cycle_second_step_size = 12;
  expect_rates(made(o), {{0, 0.00325}, {3, 0.01}, {9, 0.0055}, {15, 0.001}});

  o = LrScheduleOptions{};
  o.type = LrScheduleType::one_cycle;
  o.cycle_min_lr = 0.001;
  o.cycle_max_lr = 0.01;
  o.cycle_first_step_size = 8;
  o.decay_lr_rate = 0.5;
  o.decay_step_size = 2;
  o.cycle_min_mom = 0.85;
  o.cycle_max_mom = 0.95;
  o.decay_mom_rate = 0.01;
  const LrSchedule decaying = made(o);
  for (const auto& [it, lr, beta1] :
       std::vector<std::tuple<int64_t, double, double>>{{0, 0.002125, 0.9375},
                                                        {7, 0.01, 0.85},
                                                        {15, 0.001, 0.95},
                                                        {16, 0.0008, 0.95475},
                                                        {17, 0.001 / 1.5, 0.9595},
                                                        {19, 0.0005, 0.969}}) {
    EXPECT_NEAR(*decaying.at(it).lr, lr, 1e-9) << it;
    EXPECT_NEAR(*decaying.at(it).beta1, beta1, 1e-9) << it;
  }
  // SGD has no betas: only the rate cycles, with a warning.
  std::vector<std::string> warnings;
  auto sgd = LrSchedule::make(o, 0.01, false, &warnings);
  ASSERT_TRUE(sgd.ok());
  EXPECT_FALSE(sgd->at(3).beta1.has_value());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(LrSchedule, NoScheduleIsTheOptimizersConstantRate) {
  const LrSchedule s = made(LrScheduleOptions{}, 0.003);
  EXPECT_TRUE(s.constant());
  EXPECT_EQ(*s.for_update(0).lr, 0.003);
  EXPECT_EQ(*s.for_update(500).lr, 0.003);
}

TEST(LrSchedule, BadParametersNameTheKey) {
  auto refused = [](const LrScheduleOptions& o, const std::string& says) {
    auto s = LrSchedule::make(o, 0.01, true);
    ASSERT_FALSE(s.ok()) << says;
    EXPECT_NE(s.error().message.find(says), std::string::npos) << s.error().message;
  };
  LrScheduleOptions o;
  o.type = LrScheduleType::warmup_lr;
  o.warmup_num_steps = 0;
  refused(o, "warmup_num_steps = 0");
  o = LrScheduleOptions{};
  o.type = LrScheduleType::warmup_decay_lr;
  refused(o, "needs total_num_steps");
  o = LrScheduleOptions{};
  o.type = LrScheduleType::one_cycle;
  refused(o, "needs cycle_min_lr and cycle_max_lr");
  o.cycle_min_lr = 0.001;
  o.cycle_max_lr = 0.01;
  o.cycle_first_step_size = 0;
  refused(o, "cycle_first_step_size = 0");
}

}  // namespace
}  // namespace troupe
