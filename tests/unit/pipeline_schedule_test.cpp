// Pipeline schedules as data, checked by the simulated executor: the step's length, the
// bubble and the activations held follow the formulas; a deadlock, a backward before its
// forward, a missing message and a shape a schedule cannot run are errors that say where.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipeline/picture.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"

namespace troupe::pipeline {
namespace {

Simulation simulated(const std::string& schedule, int64_t p, int64_t m, int64_t credits = 2) {
  auto programs = make_programs(schedule, ScheduleShape{p, m});
  EXPECT_TRUE(programs.ok()) << programs.error().message;
  auto run = simulate(*programs, m, credits);
  EXPECT_TRUE(run.ok()) << run.error().message;
  return run.ok() ? *run : Simulation{};
}

// A forward of one slot and a backward of two: both schedules take 3(m + p − 1) slots, idle
// (p − 1)/(m + p − 1) of them; 1F1B holds p − s micro-batches on stage s, GPipe all m.
TEST(PipelineSchedule, OneFOneBAndGpipeTakeTheFormulasSlotsAndHoldWhatTheySay) {
  for (int64_t p : {1, 2, 4, 8})
    for (int64_t m : {p, 2 * p, 4 * p, int64_t{16}}) {
      if (m < p) continue;
      SCOPED_TRACE("p " + std::to_string(p) + ", m " + std::to_string(m));
      const double formula = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      Simulation one = simulated("1f1b", p, m), all = simulated("gpipe", p, m);
      EXPECT_EQ(one.slots, 3 * (m + p - 1));
      EXPECT_EQ(all.slots, 3 * (m + p - 1));
      EXPECT_NEAR(one.bubble(), formula, 1e-12);
      EXPECT_NEAR(all.bubble(), formula, 1e-12);
      ASSERT_EQ(one.peak_activations.size(), static_cast<std::size_t>(p));
      for (int64_t s = 0; s < p; ++s) {
        EXPECT_EQ(one.peak_activations[static_cast<std::size_t>(s)], p - s) << "stage " << s;
        EXPECT_EQ(all.peak_activations[static_cast<std::size_t>(s)], m) << "stage " << s;
        EXPECT_EQ(one.busy_slots[static_cast<std::size_t>(s)], 3 * m);
      }
    }
}

TEST(PipelineSchedule, OneFOneBOnTwoStagesRunsWarmUpThenAlternates) {
  auto stage0 = make_program("1f1b", ScheduleShape{2, 3}, 0);
  ASSERT_TRUE(stage0.ok());
  const Program expected = {{Op::load, 0},
                            {Op::forward, 0},
                            {Op::send_activation, 0},  // warm-up
                            {Op::load, 1},
                            {Op::forward, 1},
                            {Op::send_activation, 1},
                            {Op::recv_gradient, 0},
                            {Op::backward, 0},
                            {Op::load, 2},
                            {Op::forward, 2},
                            {Op::send_activation, 2},
                            {Op::recv_gradient, 1},
                            {Op::backward, 1},
                            {Op::recv_gradient, 2},
                            {Op::backward, 2},  // cool-down
                            {Op::reduce_gradients, -1},
                            {Op::optimizer_step, -1}};
  EXPECT_EQ(*stage0, expected);
}

TEST(PipelineSchedule, OneReceiveBufferPerNeighbourIsEnough) {
  for (const char* schedule : {"1f1b", "gpipe"}) {
    Simulation run = simulated(schedule, 4, 8, 1);
    EXPECT_EQ(run.slots, 3 * (8 + 4 - 1)) << schedule;
  }
}

// Stage 0 waits for a gradient before it sends the activation that would produce it.
TEST(PipelineSchedule, ADeadlockNamesEachStuckStageAndItsAction) {
  const Program stage0 = {
      {Op::load, 0},     {Op::forward, 0},           {Op::recv_gradient, 0},  {Op::send_activation, 0},
      {Op::backward, 0}, {Op::reduce_gradients, -1}, {Op::optimizer_step, -1}};
  const Program stage1 = {{Op::load, 0},           {Op::recv_activation, 0}, {Op::forward, 0},
                          {Op::backward, 0},       {Op::send_gradient, 0},   {Op::reduce_gradients, -1},
                          {Op::optimizer_step, -1}};
  auto run = simulate({stage0, stage1}, 1);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.error().message.find("stage 0 waits at action 2 (recv_gradient 0) for stage 1"),
            std::string::npos)
      << run.error().message;
  EXPECT_NE(run.error().message.find("stage 1 waits at action 1 (recv_activation 0) for stage 0"),
            std::string::npos)
      << run.error().message;
}

// Stage 1 takes micro-batch 1 first; with one buffer stage 0 cannot send it past micro-batch 0.
TEST(PipelineSchedule, SendsBlockedByFullReceiveBuffersAreADeadlockToo) {
  Program stage0, stage1;
  for (int64_t i : {0, 1})
    stage0.insert(stage0.end(), {{Op::load, i}, {Op::forward, i}, {Op::send_activation, i}});
  for (int64_t i : {0, 1}) stage0.insert(stage0.end(), {{Op::recv_gradient, i}, {Op::backward, i}});
  for (int64_t i : {1, 0})
    stage1.insert(stage1.end(), {{Op::load, i}, {Op::recv_activation, i}, {Op::forward, i}});
  for (int64_t i : {0, 1}) stage1.insert(stage1.end(), {{Op::backward, i}, {Op::send_gradient, i}});
  for (Program* p : {&stage0, &stage1})
    p->insert(p->end(), {{Op::reduce_gradients, -1}, {Op::optimizer_step, -1}});
  EXPECT_TRUE(simulate({stage0, stage1}, 2, 2).ok()) << "two buffers hold both";
  auto run = simulate({stage0, stage1}, 2, 1);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.error().message.find("stage 0 waits at action 5 (send_activation 1) for stage 1 to take one"),
            std::string::npos)
      << run.error().message;
}

TEST(PipelineSchedule, ProgramsThatBreakTheRulesAreRefusedSayingWhere) {
  auto programs = make_programs("gpipe", ScheduleShape{2, 2});
  ASSERT_TRUE(programs.ok());
  auto refused = [&](std::vector<Program> changed) {
    auto run = simulate(changed, 2);
    return run.ok() ? std::string("accepted") : run.error().message;
  };
  std::vector<Program> swapped = *programs;  // stage 1: backward 0 before forward 0
  auto& s1 = swapped[1];
  std::swap(*std::find(s1.begin(), s1.end(), Action{Op::forward, 0}),
            *std::find(s1.begin(), s1.end(), Action{Op::backward, 0}));
  EXPECT_NE(refused(swapped).find("stage 1, action 2 (backward 0): comes before forward 0"),
            std::string::npos)
      << refused(swapped);
  std::vector<Program> unreceived = *programs;
  auto& u1 = unreceived[1];
  u1.erase(std::find(u1.begin(), u1.end(), Action{Op::recv_activation, 1}));
  EXPECT_EQ(refused(unreceived), "stage 1: micro-batch 1 has no recv_activation");
  std::vector<Program> repeated = *programs;
  repeated[0].insert(repeated[0].begin() + 2, Action{Op::forward, 0});
  EXPECT_EQ(refused(repeated), "stage 0, action 2 (forward 0): repeats action 1");
  std::vector<Program> first_receives = *programs;
  first_receives[0].insert(first_receives[0].begin(), Action{Op::recv_activation, 0});
  EXPECT_EQ(refused(first_receives),
            "stage 0, action 0 (recv_activation 0): the first stage has no previous stage");
  std::vector<Program> early_step = *programs;
  std::swap(early_step[0][early_step[0].size() - 1], early_step[0][early_step[0].size() - 2]);
  EXPECT_NE(refused(early_step).find("optimizer_step): comes before reduce_gradients"), std::string::npos);
}

TEST(PipelineSchedule, ShapesAScheduleCannotRunAreRefused) {
  auto unknown = make_program("zigzag", ScheduleShape{2, 4}, 0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "unknown schedule \"zigzag\": the schedules are gpipe, 1f1b, interleaved_1f1b, zb_h1, zbv");
  auto few = make_program("1f1b", ScheduleShape{4, 2}, 0);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(
      few.error().message,
      "1f1b needs at least as many micro-batches as stages, to fill the pipeline: 2 micro-batches for 4 "
      "stages");
  EXPECT_TRUE(make_program("gpipe", ScheduleShape{4, 2}, 3).ok()) << "gpipe runs any m";
  EXPECT_FALSE(make_program("gpipe", ScheduleShape{4, 2}, 4).ok()) << "no stage 4 of 4";
}

// The executor places each forward and backward in time; the pictures draw that, one row
// per stage: 1F1B at p = 2, m = 3 (a backward two slots) leaves stage 0 idle while stage 1
// runs B0 (slots 2-3) and B2 (8-9), and stage 1 idle before its first forward and after
// its last backward.
TEST(PipelinePicture, TheTimelineIsWhereTheExecutorPutEachComputeAction) {
  Simulation s = simulated("1f1b", 2, 3);
  ASSERT_EQ(s.timeline.size(), 2u);
  std::vector<std::string> stage0;
  for (const TimedAction& t : s.timeline[0])
    stage0.push_back((t.action.op == Op::forward ? "F" : "B") + std::to_string(t.action.micro) + "@" +
                     std::to_string(t.start));
  EXPECT_EQ(stage0, (std::vector<std::string>{"F0@0", "F1@1", "B0@4", "F2@6", "B1@7", "B2@10"}));
  EXPECT_EQ(timeline_text(s),
            "stage  0 | F0 F1  .  . B0 B0 F2 B1 B1  . B2 B2\n"
            "stage  1 |  . F0 B0 B0 F1 B1 B1 F2 B2 B2  .  .\n");
  std::string svg = timeline_svg(s, "1f1b <p=2>");
  std::size_t boxes = 0;
  for (std::size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) ++boxes;
  EXPECT_EQ(boxes, 2u * 3u * 2u) << "one box per forward and backward of every stage";
  EXPECT_NE(svg.find("1f1b &lt;p=2&gt;"), std::string::npos) << "the title is escaped";
}

}  // namespace
}  // namespace troupe::pipeline
