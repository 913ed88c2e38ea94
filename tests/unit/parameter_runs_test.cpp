// Which stretches of a partition span an optimizer step updates (memory/parameter_runs.hpp).
#include <gtest/gtest.h>

#include "memory/parameter_runs.hpp"

namespace troupe {

// Found by argument-dependent lookup, so beside UpdateSegment.
bool operator==(const UpdateSegment& a, const UpdateSegment& b) {
  return a.offset == b.offset && a.count == b.count && a.step == b.step;
}

namespace {

// A span of 64 elements: parameter 3 at [0, 10), 5 at [16, 40), 7 at [48, 60); padding between.
const std::vector<ParameterRun> runs{{0, 10, 3}, {16, 24, 5}, {48, 12, 7}};

ParameterUse use(std::vector<bool> marks) {
  return std::make_shared<const std::vector<bool>>(std::move(marks));
}

TEST(UpdateSegments, EveryParameterUsedAtOneStepIsTheWholeSpan) {
  ParameterSteps steps(8);
  steps.advance(nullptr);
  EXPECT_EQ(update_segments(runs, 64, nullptr, steps), (std::vector<UpdateSegment>{{0, 64, 1}}));
}

TEST(UpdateSegments, AnUnusedParameterIsLeftOutAndItsStepCountStays) {
  ParameterSteps steps(8);
  auto all_but_5 = use({true, true, true, true, true, false, true, true});
  steps.advance(all_but_5);
  EXPECT_EQ(update_segments(runs, 64, all_but_5, steps),
            (std::vector<UpdateSegment>{{0, 10, 1}, {48, 16, 1}}));
  EXPECT_EQ(steps[5], 0);
  steps.advance(nullptr);  // now 5 is at its first step, the others at their second
  EXPECT_EQ(update_segments(runs, 64, nullptr, steps),
            (std::vector<UpdateSegment>{{0, 10, 2}, {16, 24, 1}, {48, 16, 2}}));
}

TEST(UpdateSegments, NoUsedParameterMeansNothingToUpdate) {
  ParameterSteps steps(8);
  auto none = use(std::vector<bool>(8, false));
  steps.advance(none);
  EXPECT_TRUE(update_segments(runs, 64, none, steps).empty());
  EXPECT_TRUE(update_segments({}, 64, nullptr, steps).empty());
}

TEST(RunsWithin, CutsAndRebasesTheRunsOfASubGroup) {
  EXPECT_EQ(runs_within(runs, 8, 40).size(), 2u);
  auto inside = runs_within(runs, 8, 40);
  EXPECT_EQ(inside[0].offset, 0u);
  EXPECT_EQ(inside[0].count, 2u);
  EXPECT_EQ(inside[0].parameter, 3u);
  EXPECT_EQ(inside[1].offset, 8u);
  EXPECT_EQ(inside[1].count, 24u);
  EXPECT_TRUE(runs_within(runs, 60, 4).empty());
}

}  // namespace
}  // namespace troupe
