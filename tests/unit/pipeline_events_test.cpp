// Event-driven schedulers without actors: the frontier that judges each choice, and the
// plan that runs a scheduler per rank on the simulated pipeline. Greedy schedulers over
// p up to 8 and a range of m make plans the simulated executor accepts, with the memory
// their budget allows; a scheduler that chooses what is not ready, or stops choosing, is
// refused with an error naming it, the stage and what it waited for.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/event_plan.hpp"
#include "pipeline/frontier.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"
#include "tests/support/zero_bubble_events.hpp"

namespace troupe::pipeline {
namespace {

// Backward first, forwards while fewer than `budget` are held.
struct Greedy : EventScheduler {
  explicit Greedy(int64_t budget) : budget(budget) {}
  std::optional<Action> next(const RankView& rank) override {
    if (auto backward = rank.oldest(Op::backward)) return backward;
    return rank.held < budget ? rank.oldest(Op::forward) : std::nullopt;
  }
  int64_t budget;
};

EventSchedulerFactory greedy(int64_t budget) {
  return [=](const ScheduleShape&, int64_t) { return std::make_unique<Greedy>(budget); };
}

std::vector<Program> surrounded(const Layout& layout, const std::vector<std::vector<Action>>& orders) {
  std::vector<Program> programs;
  for (int64_t r = 0; r < layout.ranks; ++r)
    programs.push_back(surround(layout, r, orders[static_cast<std::size_t>(r)]));
  return programs;
}

TEST(Frontier, AForwardIsReadyWithItsInputsAndABackwardWithItsForwardAndGradient) {
  const Layout layout{2, 1, ChunkLayout::interleaved};
  Frontier middle(layout, 1, 3, /*split=*/true);  // the last stage: loads targets, gets activations
  EXPECT_TRUE(middle.ready().empty());
  EXPECT_EQ(middle.receives_to_post().size(), 2u) << "two activations posted ahead";
  EXPECT_TRUE(middle.receives_to_post().empty()) << "no more until one is used";
  middle.loaded(0, 0);
  EXPECT_TRUE(middle.ready().empty()) << "the activation is not here yet";
  auto refused = middle.choose({Op::forward, 0, 0});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("its activation from stage 0 has not arrived"), std::string::npos)
      << refused.error().message;
  middle.activation_arrived(0, 0);
  ASSERT_EQ(middle.ready().size(), 1u);
  EXPECT_EQ(middle.ready()[0], (Action{Op::forward, 0, 0}));
  ASSERT_TRUE(middle.choose({Op::forward, 0, 0}).ok());
  EXPECT_EQ(middle.held(), 1);
  EXPECT_EQ(middle.receives_to_post().size(), 1u) << "the used credit comes back";
  ASSERT_EQ(middle.ready().size(), 1u) << "the last stage's input half needs no gradient";
  EXPECT_EQ(middle.ready()[0], (Action{Op::backward_input, 0, 0}));
  EXPECT_FALSE(middle.choose({Op::backward, 0, 0}).ok()) << "halves, not a whole backward";
  EXPECT_FALSE(middle.choose({Op::backward_weight, 0, 0}).ok()) << "the weight half waits for its input half";
  ASSERT_TRUE(middle.choose({Op::backward_input, 0, 0}).ok());
  ASSERT_TRUE(middle.choose({Op::backward_weight, 0, 0}).ok());
  EXPECT_EQ(middle.held(), 0);
  auto again = middle.choose({Op::forward, 0, 0});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("chose F0 again"), std::string::npos) << again.error().message;
  EXPECT_FALSE(middle.choose({Op::send_activation, 1, 0}).ok()) << "messages are troupe's";
  EXPECT_FALSE(middle.choose({Op::forward, 3, 0}).ok()) << "micro-batch out of range";
  EXPECT_EQ(middle.running(), 3);
  EXPECT_TRUE(middle.anything_coming()) << "micro-batch 1 and its activation";
  EXPECT_NE(middle.waiting_for().find("activation 1 from stage 0"), std::string::npos)
      << middle.waiting_for();
}

TEST(Frontier, AStageBeforeTheLastWaitsForTheGradientOfItsOutput) {
  Frontier first(Layout{3, 1, ChunkLayout::interleaved}, 0, 1, /*split=*/false);
  first.loaded(0, 0);
  ASSERT_TRUE(first.choose({Op::forward, 0, 0}).ok());
  EXPECT_TRUE(first.ready().empty());
  EXPECT_TRUE(first.anything_coming());
  EXPECT_EQ(first.waiting_for(), "gradient 0 from stage 1");
  first.gradient_arrived(0, 0);
  ASSERT_TRUE(first.choose({Op::backward, 0, 0}).ok());
  EXPECT_TRUE(first.all_chosen());
  EXPECT_FALSE(first.anything_coming());
}

TEST(EventPlan, GreedySchedulersMakeValidPlansWithinTheirBudget) {
  for (int64_t p : {2, 3, 4, 8})
    for (int64_t m : {p, 2 * p, 4 * p})
      for (int64_t budget : {int64_t{1}, p, m}) {
        SCOPED_TRACE("p " + std::to_string(p) + ", m " + std::to_string(m) + ", budget " +
                     std::to_string(budget));
        const Layout layout{p, 1, ChunkLayout::interleaved};
        auto orders = plan_events("greedy", greedy(budget), layout, m, false);
        ASSERT_TRUE(orders.ok()) << orders.error().message;
        auto run = simulate(surrounded(layout, *orders), layout, m);
        ASSERT_TRUE(run.ok()) << run.error().message;
        for (int64_t held : run->peak_activations) EXPECT_LE(held, budget);
        if (budget == 1) {  // one micro-batch in the pipeline at a time
          EXPECT_NEAR(run->bubble(), 1.0 - 1.0 / static_cast<double>(p), 1e-9);
        }
      }
}

// tests/support/zero_bubble_events.hpp decides from events as the list scheduler plans:
// it idles less than half 1F1B's bubble and about as little as zbv's plan, in 1F1B's memory.
TEST(EventPlan, AZeroBubbleSchedulerOverAVIdlesAboutAsLittleAsZbv) {
  for (int64_t p : {2, 4, 8}) {
    const int64_t m = 2 * p;
    SCOPED_TRACE("p " + std::to_string(p));
    const Layout vee{p, 2, ChunkLayout::v_shape};
    auto orders = plan_events(
        "zero_bubble",
        [p](const ScheduleShape&, int64_t) { return std::make_unique<testing::ZeroBubbleEvents>(p); }, vee, m,
        true);
    ASSERT_TRUE(orders.ok()) << orders.error().message;
    auto run = simulate(surrounded(vee, *orders), vee, m);
    ASSERT_TRUE(run.ok()) << run.error().message;
    auto zbv = simulate(*make_programs("zbv", {p, m, 2}), vee, m);
    ASSERT_TRUE(zbv.ok());
    // Keeping room for every admitted micro-batch's way back costs up to 4 points against
    // zbv's plan, which at unit costs never meets the stall that room avoids.
    EXPECT_LE(run->bubble(), zbv->bubble() + 0.04)
        << "planned " << run->bubble() << ", zbv " << zbv->bubble();
    EXPECT_LE(run->bubble(), bubble_formula("1f1b", {p, m, 1}) / 2);
    std::printf("p %ld, m %ld: zero-bubble events plan idles %.1f%%, zbv's %.1f%%\n", static_cast<long>(p),
                static_cast<long>(m), 100 * run->bubble(), 100 * zbv->bubble());
    EXPECT_LE(run->peak_stage_activations(), static_cast<double>(p)) << run->peak_stage_activations();
  }
}

// Rank 1 never runs the backward of micro-batch 0: the plan stops with every rank's state.
struct SkipsBackwardZero : Greedy {
  SkipsBackwardZero() : Greedy(2) {}
  std::optional<Action> next(const RankView& rank) override {
    if (rank.rank != 1) return Greedy::next(rank);
    RankView without = rank;
    without.ready.clear();
    for (const Action& a : rank.ready)
      if (!(a.op == Op::backward && a.micro == 0)) without.ready.push_back(a);
    return Greedy::next(without);
  }
};

TEST(EventPlan, AStuckSchedulerIsRefusedNamingItTheStageAndWhatItWaitsFor) {
  auto orders = plan_events(
      "skips", [](const ScheduleShape&, int64_t) { return std::make_unique<SkipsBackwardZero>(); },
      Layout{2, 1, ChunkLayout::interleaved}, 4, false);
  ASSERT_FALSE(orders.ok());
  const std::string& e = orders.error().message;
  EXPECT_NE(e.find("scheduler \"skips\" gets stuck"), std::string::npos) << e;
  EXPECT_NE(e.find("stage 1 has"), std::string::npos) << e;
  EXPECT_NE(e.find("ready: B0"), std::string::npos) << e;
  EXPECT_NE(e.find("stage 0 has"), std::string::npos) << e;
  EXPECT_NE(e.find("waits for gradient 0 from stage 1"), std::string::npos) << e;
}

struct ChoosesTooSoon : EventScheduler {
  std::optional<Action> next(const RankView& rank) override {
    return rank.rank == 1 ? std::optional<Action>(Action{Op::forward, 1, 0}) : std::nullopt;
  }
};

TEST(EventPlan, AChoiceThatIsNotReadyIsRefusedSayingWhy) {
  auto orders = plan_events(
      "eager", [](const ScheduleShape&, int64_t) { return std::make_unique<ChoosesTooSoon>(); },
      Layout{2, 1, ChunkLayout::interleaved}, 2, false);
  ASSERT_FALSE(orders.ok());
  EXPECT_NE(orders.error().message.find("scheduler \"eager\" on stage 1 chose F1, which is not ready: its "
                                        "activation from stage 0 has not arrived"),
            std::string::npos)
      << orders.error().message;
}

TEST(EventPlan, ARegisteredEventSchedulerIsPlannedLikeAScheduleFunction) {
  ASSERT_TRUE(register_schedule("events_greedy_test",
                                CustomSchedule{nullptr, ChunkLayout::interleaved, 1, greedy(4), false})
                  .ok());
  EXPECT_TRUE(event_scheduler("events_greedy_test"));
  EXPECT_FALSE(event_scheduler("1f1b"));
  auto programs = make_programs("events_greedy_test", {4, 8, 1});
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  EXPECT_TRUE(simulate(*programs, 8).ok());
  auto both = register_schedule(
      "both_test", CustomSchedule{[](const ScheduleShape&) { return std::vector<std::vector<Action>>{}; },
                                  ChunkLayout::interleaved, 1, greedy(1), false});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message.find("not both"), std::string::npos) << both.error().message;
}

}  // namespace
}  // namespace troupe::pipeline
