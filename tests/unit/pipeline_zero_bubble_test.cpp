// The schedules beyond 1F1B: virtual stages (interleaved and V layouts), the backward
// split into its input and weight halves, schedules read from a table. Each built-in is
// run by the simulated executor for p up to 8 over a range of m: it must not deadlock, must
// hold no more activations than its paper says, and must idle no more than its formula.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/layout.hpp"
#include "pipeline/picture.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"
#include "pipeline/table.hpp"

namespace troupe::pipeline {
namespace {

Simulation simulated(const std::string& schedule, int64_t p, int64_t m, int64_t v = 0) {
  ScheduleShape shape{p, m, v > 0 ? v : default_virtual_stages(schedule)};
  auto programs = make_programs(schedule, shape);
  EXPECT_TRUE(programs.ok()) << programs.error().message;
  if (!programs.ok()) return {};
  auto run = simulate(*programs, layout_of(schedule, shape), m);
  EXPECT_TRUE(run.ok()) << run.error().message;
  return run.ok() ? *run : Simulation{};
}

double one_f_one_b_bubble(int64_t p, int64_t m) {
  return static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
}

TEST(PipelineLayout, InterleavedChunksGoRoundTheRanksAndTheVComesBack) {
  const Layout round{4, 2, ChunkLayout::interleaved}, vee{4, 2, ChunkLayout::v_shape};
  EXPECT_EQ(round.virtual_stage(1, 0), 1);
  EXPECT_EQ(round.virtual_stage(1, 1), 5);
  EXPECT_EQ(vee.virtual_stage(1, 0), 1);
  EXPECT_EQ(vee.virtual_stage(1, 1), 6);
  EXPECT_TRUE(vee.first(0, 0));
  EXPECT_TRUE(vee.last(0, 1)) << "rank 0 holds the loss in a V";
  EXPECT_TRUE(round.last(3, 1));
  for (const Layout& layout : {round, vee})
    for (int64_t stage = 0; stage < layout.virtual_stages(); ++stage)
      EXPECT_EQ(layout.virtual_stage(layout.rank_of(stage), layout.chunk_of(stage)), stage);
  EXPECT_FALSE(check_layout({4, 3, ChunkLayout::v_shape}).ok());
}

TEST(PipelineAction, ShortNamesReadBackAndBadOnesSayWhatNamesLookLike) {
  for (const Action& a : {Action{Op::forward, 3, 0}, Action{Op::backward_input, 12, 1},
                          Action{Op::backward_weight, 0, 0}, Action{Op::backward, 7, 0}}) {
    auto back = parse_short_name(short_name(a, a.chunk > 0));
    ASSERT_TRUE(back.ok()) << short_name(a, true);
    EXPECT_EQ(*back, a);
  }
  EXPECT_EQ(short_name({Op::backward_input, 2, 1}, true), "I2.1");
  for (const char* bad : {"X3", "F", "F3.", "F3.1.2", "f3", "F-1", ""})
    EXPECT_FALSE(parse_short_name(bad).ok()) << bad;
  EXPECT_NE(parse_short_name("Q2").error().message.find("\"Q2\" is not an action"), std::string::npos);
}

// Every built-in at p = 1 to 8 and m from p to 4p: no deadlock with two receive buffers
// per neighbour, and the bubble and the memory their papers give, at unit costs
// (a forward, an input half and a weight half one slot each, a whole backward two).
TEST(PipelineZeroBubble, EveryBuiltInRunsAndKeepsItsPromises) {
  for (int64_t p : {1, 2, 3, 4, 8})
    for (int64_t m : {p, 2 * p, 3 * p, 4 * p}) {
      SCOPED_TRACE("p " + std::to_string(p) + ", m " + std::to_string(m));
      const double idle = static_cast<double>(p - 1);
      Simulation one = simulated("1f1b", p, m);
      EXPECT_NEAR(one.bubble(), one_f_one_b_bubble(p, m), 1e-12);
      Simulation h1 = simulated("zb_h1", p, m);
      EXPECT_NEAR(h1.bubble(), idle / (3.0 * static_cast<double>(m) + idle), 1e-12)
          << "(p − 1) of 3m + p − 1";
      EXPECT_LE(h1.peak_stage_activations(), static_cast<double>(p)) << "1F1B's stage 0 holds p";
      for (int64_t v : {2, 3, 4}) {
        Simulation inter = simulated("interleaved_1f1b", p, m, v);
        // (p − 1)/(vm + p − 1): the bubble/ideal of Megatron's paper, (p − 1)/m, over v.
        EXPECT_NEAR(inter.bubble(), idle / (static_cast<double>(v * m) + idle), 1e-12) << "v " << v;
      }
      Simulation vee = simulated("zbv", p, m);
      EXPECT_NEAR(vee.bubble(), idle / (6.0 * static_cast<double>(m) + idle), 0.01)
          << "the last rank's wait for the first forward is all it idles, nearly";
      EXPECT_LE(vee.peak_stage_activations(), static_cast<double>(p));
    }
}

// ZB-H1 at p = 2: the weight halves of rank 1 trail by one, so its input halves, which
// rank 0 waits for, come first. Rank 0, whose input halves nobody waits for, runs whole
// backwards in the same slots.
TEST(PipelineZeroBubble, ZbH1OnTwoStagesDelaysTheLastStagesWeightHalves) {
  auto programs = make_programs("zb_h1", ScheduleShape{2, 4, 1});
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  EXPECT_EQ(schedule_table(*programs, 1),
            "F0,F1,B0,F2,B1,F3,B2,B3\n"
            "F0,I0,F1,I1,W0,F2,I2,W1,F3,I3,W2,W3\n");
  auto run = simulate(*programs, 4);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->slots, 13) << "3m + p − 1";
  EXPECT_EQ(timeline_text(*run),
            "stage  0 | F0 F1  . B0 B0 F2 B1 B1 F3 B2 B2 B3 B3\n"
            "stage  1 |  . F0 I0 F1 I1 W0 F2 I2 W1 F3 I3 W2 W3\n");
}

// ZB-V at p = 2, m 4: rank 0 holds virtual stages 0 and 3, rank 1 stages 1 and 2. Each
// chunk's forward sits beside its backward and each input half beside its weight half,
// the order that keeps the V nearly full when a backward costs more than a forward; the
// first stage's halves run as whole backwards.
TEST(PipelineZeroBubble, ZbvKeepsEachChunksPassesTogether) {
  auto programs = make_programs("zbv", ScheduleShape{2, 4, 2});
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  EXPECT_EQ(schedule_table(*programs, 2),
            "F0.0,F1.0,F2.0,F0.1,I0.1,W0.1,F1.1,I1.1,W1.1,F3.0,B0.0,F2.1,I2.1,W2.1,B1.0,F3.1,I3.1,W3.1,B2.0,"
            "B3.0\n"
            "F0.0,F0.1,F1.0,F1.1,I0.1,W0.1,F2.0,I0.0,W0.0,F2.1,I1.1,W1.1,F3.0,I1.0,W1.0,F3.1,I2.1,W2.1,I2.0,"
            "I3.1,I3.0,W2.0,W3.1,W3.0\n");
  auto run = simulate(*programs, layout_of("zbv", {2, 4, 2}), 4);
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_NEAR(run->bubble(), 1.0 / 25.0, 1e-12) << "p − 1 slots of 6m + p − 1";
}

// ZB-V's order for every micro-batch count from its warm-up's 2p − 1 on, odd ones too: it
// never deadlocks, idles about its formula's share and holds no more than 1F1B's stage 0.
TEST(PipelineZeroBubble, ZbvRunsEveryMicroBatchCountFromItsWarmUp) {
  for (int64_t p : {2, 3, 4, 8})
    for (int64_t m = 2 * p - 1; m <= 4 * p; ++m) {
      SCOPED_TRACE("p " + std::to_string(p) + ", m " + std::to_string(m));
      Simulation vee = simulated("zbv", p, m);
      const double idle = static_cast<double>(p - 1);
      EXPECT_LE(vee.bubble(), idle / (6.0 * static_cast<double>(m) + idle) + 0.01);
      EXPECT_LE(vee.peak_stage_activations(), static_cast<double>(p));
    }
}

TEST(PipelineZeroBubble, ShapesTheSchedulesCannotRunAreRefusedSayingWhy) {
  EXPECT_EQ(check_shape("interleaved_1f1b", {4, 6, 2}).error().message,
            "interleaved_1f1b takes micro-batches in groups of one per stage: 6 micro-batches is not a "
            "multiple of 4 stages");
  EXPECT_EQ(check_shape("zbv", {4, 8, 3}).error().message, "zbv runs 2 virtual stages per rank (a V), not 3");
  EXPECT_EQ(
      check_shape("zb_h1", {4, 8, 2}).error().message,
      "zb_h1 runs one chunk per rank, not 2 virtual stages: virtual stages need interleaved_1f1b or zbv");
  EXPECT_FALSE(check_shape("zb_h1", {4, 2, 1}).ok());
}

Layout plain(int64_t p) {
  return Layout{p, 1, ChunkLayout::interleaved};
}

// What `troupe schedule show --csv` writes, a table reads back as the same programs.
TEST(PipelineTable, EveryBuiltInReadsBackFromItsTable) {
  for (const std::string& name : schedule_names()) {
    ScheduleShape shape{4, 8, default_virtual_stages(name)};
    auto programs = make_programs(name, shape);
    ASSERT_TRUE(programs.ok()) << name;
    auto back = parse_schedule_table(schedule_table(*programs, shape.virtual_stages), "t.csv",
                                     layout_of(name, shape), shape.micro_batches);
    ASSERT_TRUE(back.ok()) << name << ": " << back.error().message;
    EXPECT_EQ(*back, *programs) << name;
  }
}

std::string refusal(const std::string& table, const Layout& layout, int64_t m) {
  auto programs = parse_schedule_table(table, "mine.csv", layout, m);
  return programs.ok() ? "accepted" : programs.error().message;
}

TEST(PipelineTable, BadTablesAreRefusedNamingTheFileLineAndAction) {
  EXPECT_EQ(refusal("# two stages\nF0,B0,F1,B1\nF0, X1 ,B0\n", plain(2), 2),
            "mine.csv: line 3 (stage 1), cell 2: \"X1\" is not an action: actions are F (forward), B (whole "
            "backward), I (input-gradient half of a backward) or W (weight-gradient half), then the "
            "micro-batch, then .chunk with virtual stages: F3, I3, W3, B3, F3.1");
  EXPECT_EQ(refusal("F0,B0,F1,B1\nF0,B0\n", plain(2), 2),
            "mine.csv: stage 1: micro-batch 1 has no forward (stage 0 is line 1, stage 1 is line 2)");
  EXPECT_EQ(refusal("F0,B0,F1,B1\nF0,B0,F1,I1\n", plain(2), 2),
            "mine.csv: stage 1: micro-batch 1 has backward_input but no backward_weight (stage 0 is line 1, "
            "stage 1 is line 2)");
  EXPECT_EQ(refusal("F0,B0,F5,B5\nF0,B0\n", plain(2), 2),
            "mine.csv: line 1 (stage 0), cell 3: F5 names micro-batch 5, but a step has 2 (0 to 1)");
  EXPECT_EQ(refusal("F0,B0\n", plain(2), 1),
            "mine.csv has 1 rows of actions, but the pipeline has 2 stages (one row each)");
  EXPECT_EQ(refusal("F0,B0\nF0,B0\nF0,B0\n", plain(2), 1),
            "mine.csv: line 3 is a row for stage 2, but the pipeline has 2 stages (one row each)");
  EXPECT_NE(refusal("F0.2,B0\nF0,B0\n", plain(2), 1).find("F0.2 names chunk 2, but each rank holds 1"),
            std::string::npos);
  // Stage 0 waits for micro-batch 0's gradient before it runs the forward of 1; stage 1
  // runs micro-batch 1 first and waits for its activation.
  EXPECT_EQ(
      refusal("F0,B0,F1,B1\nF1,B1,F0,B0\n", plain(2), 2),
      "mine.csv: the schedule deadlocks: stage 0 waits at action 3 (recv_gradient 0) for stage 1; stage 1 "
      "waits at action 1 (recv_activation 1) for stage 0 (stage 0 is line 1, stage 1 is line 2)");
}

TEST(PipelineTable, AHandWrittenTableWithSplitBackwardsAndChunksRuns) {
  const Layout vee{2, 2, ChunkLayout::v_shape};
  // Micro-batch 0 down rank 0 and 1 (chunk 0), back up rank 1 and 0 (chunk 1).
  auto programs =
      parse_schedule_table("F0.0,F0.1,I0.1,I0.0,W0.1,W0.0\nF0.0,F0.1,I0.1,W0.1,I0.0,W0.0\n", "v.csv", vee, 1);
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  auto run = simulate(*programs, vee, 1);
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_EQ(run->busy_slots, (std::vector<int64_t>{6, 6}));
}

}  // namespace
}  // namespace troupe::pipeline
