// ZeRO's plan (layout per stage, memory estimate) and stage 3's fetch planner, on their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "memory/fetch_planner.hpp"
#include "memory/zero_plan.hpp"
#include "memory/zero_policy.hpp"

namespace troupe {
namespace {

// A model of 4 layers: an embedding, two blocks, a head.
ZeroPlanInput model(int64_t stage, int64_t dp) {
  ZeroPlanInput in;
  in.policy = ZeroPolicy::of(stage);
  in.dp = dp;
  in.layers = {{1000, 200}, {64, 64, 4000, 64}, {64, 64, 4000, 64}, {64, 2000}};
  in.reduce_bucket_size = 3000;
  in.persistence_threshold = 100;
  return in;
}

TEST(ZeroPlan, StagesZeroToTwoLayParametersOutInReverseInBuckets) {
  for (int64_t stage : {0, 1, 2}) {
    auto plan = plan_zero(model(stage, 4));
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->parameter_of.front(), 11u);
    EXPECT_EQ(plan->parameter_of.back(), 0u);
    EXPECT_EQ(plan->layout.partitions(), stage == 0 ? 1 : 4);
    EXPECT_GT(plan->layout.row_count(), 2u);
    EXPECT_EQ(plan->parameter_elements, 11648u);
  }
}

TEST(ZeroPlan, StageThreeGivesEachLayerARowAndKeepsSmallParametersInAPersistentOne) {
  auto plan = plan_zero(model(3, 2));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->layout.row_count(), 5u);  // persistent + 4 layers
  EXPECT_TRUE(plan->persistent_rows[0]);
  EXPECT_EQ(plan->layer_rows, (std::vector<std::vector<std::size_t>>{{1}, {2}, {3}, {4}}));
  EXPECT_EQ(plan->row_layer, (std::vector<int64_t>{-1, 0, 1, 2, 3}));
  EXPECT_EQ(plan->layout.row(0).parameter_count, 7u);  // the six 64s and... none of the 200s
  EXPECT_EQ(plan->parameter_of[0], 2u);
  EXPECT_EQ(plan->layout.row(2).parameter_count, 1u);  // the 4000 of block 0
}

// The head borrows the embedding's 1000 (a tied weight): laid out once, in the embedding's
// row, which the head needs gathered too.
ZeroPlanInput tied(int64_t stage) {
  ZeroPlanInput in = model(stage, 2);
  in.layers.back() = {64};  // the head's own projection is gone
  in.borrowed = {{}, {}, {}, {0}};
  return in;
}

TEST(ZeroPlan, ABorrowedTensorIsLaidOutOnceAndGatheredForEveryLayerThatUsesIt) {
  for (int64_t stage : {0, 1, 2, 3}) {
    auto plan = plan_zero(tied(stage));
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_EQ(plan->parameter_elements, 11648u - 2000u);
    EXPECT_EQ(plan->layout.parameter_count(), 11u);
  }
  auto plan = plan_zero(tied(3));
  EXPECT_EQ(plan->layer_rows, (std::vector<std::vector<std::size_t>>{{1}, {2}, {3}, {1}}));
  // A borrowed parameter in the persistent row needs no gathering.
  ZeroPlanInput small = tied(3);
  small.borrowed = {{}, {}, {}, {2}};  // the first 64 of block 0
  auto persistent = plan_zero(small);
  ASSERT_TRUE(persistent.ok());
  EXPECT_TRUE(persistent->layer_rows.back().empty());
}

// A weight tied across pipeline stages: on the stage that owns it (the embedding's 1000
// among the model's tensors) and on one that holds a copy (the head's 1000 beside other
// tensors), the dedicated tensor gets a row of its own, never persistent, so each rank's
// block of it is the same elements on both stages, whatever else each stage holds.
TEST(ZeroPlan, ADedicatedTensorHasARowOfItsOwnWithTheSameBlocksOnEveryLayout) {
  for (int64_t stage : {0, 1, 2, 3}) {
    ZeroPlanInput embedding_stage = model(stage, 2), head_stage = model(stage, 2);
    embedding_stage.layers = {{1000, 64}, {64, 64, 4000}};
    embedding_stage.dedicated = {true, false, false, false, false};
    head_stage.layers = {{64, 64, 4000}, {64, 1000}};
    head_stage.dedicated = {false, false, false, false, true};
    auto a = plan_zero(embedding_stage), b = plan_zero(head_stage);
    ASSERT_TRUE(a.ok() && b.ok());
    auto row_holding = [](const ZeroPlan& plan, std::size_t parameter) {
      for (std::size_t p = 0; p < plan.parameter_of.size(); ++p)
        if (plan.parameter_of[p] == parameter) return plan.layout.row_of_parameter(p);
      return std::size_t{0};
    };
    std::size_t ra = row_holding(*a, 0), rb = row_holding(*b, 4);
    EXPECT_EQ(a->layout.row(ra).parameter_count, 1u) << "stage " << stage;
    EXPECT_EQ(b->layout.row(rb).parameter_count, 1u) << "stage " << stage;
    EXPECT_EQ(a->layout.row(ra).block, b->layout.row(rb).block) << "stage " << stage;
    EXPECT_EQ(a->layout.row_elements(ra), b->layout.row_elements(rb));
    if (stage == 3) {
      EXPECT_FALSE(a->persistent_rows[ra]);
      EXPECT_EQ(a->row_layer[ra], 0);
      EXPECT_EQ(b->row_layer[rb], 1);
      EXPECT_NE(std::find(b->layer_rows[1].begin(), b->layer_rows[1].end(), rb), b->layer_rows[1].end());
    }
  }
}

TEST(ZeroPlan, BorrowingFromALaterLayerIsRefused) {
  ZeroPlanInput in = tied(3);
  in.borrowed = {{}, {7}, {}, {}};  // parameter 7 belongs to block 1 (layer 2)
  auto plan = plan_zero(in);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().message, "layer 1 borrows parameter 7, which no earlier layer holds");
}

TEST(ZeroPlan, StageThreeHoldsABorrowedRowThroughBackwardUntilItsOwnLayer) {
  // Rows of 1000+200 (embedding) and 4000 (blocks); the head re-gathers the embedding's
  // row after the blocks, and backward keeps it from the head down to the embedding.
  FetchPlanner::Limits none;
  none.prefetch_bucket_size = 0;
  none.max_reuse_distance = 0;
  auto shared = plan_zero(tied(3));
  ASSERT_TRUE(shared.ok());
  std::size_t embedding = shared->layout.row_elements(1), block = shared->layout.row_elements(2);
  EXPECT_EQ(stage3_peak_gathered(*shared, none), shared->layout.row_elements(0) + embedding + block);
}

TEST(ZeroPlan, EstimateFollowsTheZeroFormulas) {
  // Large rows so padding is negligible: 16, 8 + 8/N, 4 + 12/N bytes per parameter.
  for (int64_t dp : {1, 2, 4}) {
    for (int64_t stage : {0, 1, 2}) {
      ZeroPlanInput in;
      in.policy = ZeroPolicy::of(stage);
      in.dp = dp;
      in.layers = {{1 << 20}, {1 << 20}};
      in.reduce_bucket_size = 1 << 19;
      auto plan = plan_zero(in);
      ASSERT_TRUE(plan.ok());
      MemoryBytes b = estimate_model_state(*plan, ModelStateInputs{});
      double per = static_cast<double>(b.model_state()) / static_cast<double>(2 << 20);
      double n = static_cast<double>(dp);
      double formula = stage == 0 ? 16 : stage == 1 ? 8 + 8 / n : 4 + 12 / n;
      EXPECT_NEAR(per, formula, 1e-3) << "stage " << stage << " dp " << dp;
    }
  }
}

TEST(ZeroPolicy, ABadStageIsRefusedNamingIt) {
  for (int64_t stage : {-1, 4}) {
    auto policy = ZeroPolicy::for_stage(stage);
    ASSERT_FALSE(policy.ok());
    EXPECT_EQ(policy.error().message, "ZeRO stage must be 0, 1, 2 or 3, got " + std::to_string(stage));
  }
}

// DeepSpeed's three partitions, and what each stage does because of them.
TEST(ZeroPolicy, EachStagePartitionsWhatDeepSpeedsDoes) {
  struct Row {
    bool optimizer_state, gradients, parameters;
    ParameterHome home;
    bool every_micro_batch, gathers_flat_rows_after_update, gathers_persistent_rows_after_update;
  };
  const Row rows[] = {{false, false, false, ParameterHome::model_tensors, false, false, false},
                      {true, false, false, ParameterHome::flat, false, true, true},
                      {true, true, false, ParameterHome::flat, true, true, true},
                      {true, true, true, ParameterHome::partition, true, false, true}};
  for (int64_t stage = 0; stage <= 3; ++stage) {
    const ZeroPolicy policy = ZeroPolicy::of(stage);
    const Row& want = rows[stage];
    SCOPED_TRACE("stage " + std::to_string(stage));
    EXPECT_EQ(policy.stage(), stage);
    EXPECT_EQ(policy.partitions_optimizer_state(), want.optimizer_state);
    EXPECT_EQ(policy.partitions_gradients(), want.gradients);
    EXPECT_EQ(policy.partitions_parameters(), want.parameters);
    EXPECT_EQ(policy.parameter_home(), want.home);
    EXPECT_EQ(policy.reduce_scatters(), want.optimizer_state);
    EXPECT_EQ(policy.every_rank_updates_everything(), !want.optimizer_state);
    EXPECT_EQ(policy.blocks_per_row(4), want.optimizer_state ? 4 : 1);
    EXPECT_EQ(policy.reduces_every_micro_batch(), want.every_micro_batch);
    EXPECT_EQ(policy.keeps_flat_gradients(), !want.gradients);
    EXPECT_EQ(policy.gathers_before_use(), want.parameters);
    EXPECT_EQ(policy.gathers_after_update(false), want.gathers_flat_rows_after_update);
    EXPECT_EQ(policy.gathers_after_update(true), want.gathers_persistent_rows_after_update);
    EXPECT_EQ(policy.stops_at_minimum_loss_scale(), stage > 0);
  }
}

FetchPlanner::Limits limits(std::size_t prefetch, std::size_t live, std::size_t reuse) {
  FetchPlanner::Limits l;
  l.prefetch_bucket_size = prefetch;
  l.max_live_parameters = live;
  l.max_reuse_distance = reuse;
  return l;
}

// One pass over rows 0..3 forward then 3..0 backward; returns every gather issued.
std::vector<std::size_t> pass(FetchPlanner& planner, std::vector<std::size_t> order = {0, 1, 2, 3}) {
  std::vector<std::size_t> gathered;
  planner.begin_pass();
  auto use = [&](std::size_t r) {
    for (std::size_t g : planner.acquire(r)) gathered.push_back(g);
    planner.release(r);
  };
  for (std::size_t r : order) use(r);
  for (std::size_t i = order.size(); i-- > 0;) use(order[i]);
  planner.end_pass();
  return gathered;
}

TEST(FetchPlanner, FirstPassRecordsThenReplaysWithPrefetch) {
  FetchPlanner planner({10, 10, 10, 10}, {}, limits(20, 1000, 0));
  auto first = pass(planner);
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::record);
  EXPECT_EQ(first, (std::vector<std::size_t>{0, 1, 2, 3, 3, 2, 1, 0}));  // on demand only
  EXPECT_EQ(planner.trace().size(), 8u);
  auto second = pass(planner);
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::complete);
  // Reuse distance 0 still keeps row 3 across the turn (used twice in a row); every
  // other use gathers again.
  EXPECT_EQ(second.size(), 7u);
  EXPECT_EQ(planner.held_elements(), 0u);
  // Prefetch runs ahead: more than the row in use is held, but each acquire adds at
  // most prefetch_bucket_size (20) to what the previous one left.
  EXPECT_GT(planner.peak_held_elements(), 10u);
  EXPECT_LE(planner.peak_held_elements(), 40u);
}

TEST(FetchPlanner, ReuseDistanceKeepsTheLastLayerAcrossTheTurn) {
  FetchPlanner planner({10, 10, 10, 10}, {}, limits(0, 1000, 5));
  pass(planner);
  auto replay = pass(planner);
  // Row 3 is used twice in a row (end of forward, start of backward): kept, gathered once.
  EXPECT_EQ(std::count(replay.begin(), replay.end(), 3u), 1);
  EXPECT_EQ(std::count(replay.begin(), replay.end(), 2u), 2);
}

TEST(FetchPlanner, MaxLiveParametersCapsPrefetch) {
  FetchPlanner planner({10, 10, 10, 10}, {}, limits(1000, 15, 0));
  pass(planner);
  pass(planner);
  EXPECT_LE(planner.peak_held_elements(), 10u) << "no room under the cap: only the row in use";
}

TEST(FetchPlanner, PersistentRowsAreHeldAndNeverFreed) {
  FetchPlanner planner({5, 10, 10}, {true, false, false}, limits(0, 1000, 0));
  EXPECT_EQ(planner.held_elements(), 5u);
  auto gathered = pass(planner, {1, 2});
  EXPECT_EQ(std::count(gathered.begin(), gathered.end(), 0u), 0);
  EXPECT_TRUE(planner.held(0));
  EXPECT_FALSE(planner.release(0));
}

TEST(FetchPlanner, AChangedOrderDiscardsTheTraceAndRecordsAgain) {
  FetchPlanner planner({10, 10, 10, 10}, {}, limits(100, 1000, 0));
  pass(planner);
  pass(planner);
  EXPECT_EQ(planner.invalidations(), 0);
  pass(planner, {0, 2, 3});  // a layer skipped
  EXPECT_EQ(planner.invalidations(), 1);
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::invalid);
  EXPECT_EQ(planner.held_elements(), 0u) << "prefetched rows are freed at the end of the pass";
  pass(planner, {0, 2, 3});
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::record);
  EXPECT_EQ(planner.trace().size(), 6u);
  pass(planner, {0, 2, 3});
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::complete);
  EXPECT_EQ(planner.invalidations(), 1);
}

// A pipeline interleaves micro-batches: forwards and backwards are passes of their own
// kinds, each replaying its own trace, so alternating them never discards a trace.
TEST(FetchPlanner, PassKindsKeepTheirOwnTraces) {
  FetchPlanner planner({10, 10, 10, 10}, {}, limits(20, 1000, 0));
  auto run = [&](std::size_t kind, std::vector<std::size_t> order) {
    std::vector<std::size_t> gathered;
    planner.begin_pass(kind);
    for (std::size_t r : order) {
      for (std::size_t g : planner.acquire(r)) gathered.push_back(g);
      planner.release(r);
    }
    planner.end_pass();
    return gathered;
  };
  const std::vector<std::size_t> forward{0, 1, 2, 3}, backward{3, 2, 1, 0};
  run(1, forward);  // warm-up of a 1F1B stage: two forwards, then alternate
  run(1, forward);
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::complete);
  run(2, backward);
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::record);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(run(1, forward), forward);
    EXPECT_EQ(planner.mode(), FetchPlanner::Mode::complete);
    EXPECT_EQ(run(2, backward), backward);
  }
  EXPECT_EQ(planner.mode(), FetchPlanner::Mode::complete) << "the backward trace is replayed too";
  EXPECT_EQ(planner.invalidations(), 0);
  EXPECT_GT(planner.peak_held_elements(), 10u) << "replayed passes prefetch ahead";
  EXPECT_EQ(planner.held_elements(), 0u);
}

TEST(MemoryLedger, ChargesFollowBufferLifetimesAndPeaksReset) {
  auto ledger = std::make_shared<MemoryLedger>();
  {
    MemoryCharge a(ledger, MemoryKind::gradients, 100);
    MemoryCharge b(ledger, MemoryKind::gradients, 50);
    EXPECT_EQ(ledger->current()[MemoryKind::gradients], 150);
    MemoryCharge moved = std::move(b);
    EXPECT_EQ(ledger->current()[MemoryKind::gradients], 150);
  }
  EXPECT_EQ(ledger->current()[MemoryKind::gradients], 0);
  EXPECT_EQ(ledger->peak()[MemoryKind::gradients], 150);
  ledger->reset_peaks();
  EXPECT_EQ(ledger->peak()[MemoryKind::gradients], 0);
  ledger->set(MemoryKind::optimizer_state, 64);
  EXPECT_EQ(ledger->peak().model_state(), 64);
}

// What is in the device's memory is counted in the totals and, apart, on the device side;
// a measured figure replaces its side's last one without dropping the charges beside it.
TEST(MemoryLedger, CountsTheDevicesShareApart) {
  auto ledger = std::make_shared<MemoryLedger>();
  MemoryCharge host(ledger, MemoryKind::parameters, 100);
  {
    MemoryCharge device(ledger, MemoryKind::parameters, 40, MemorySide::device);
    EXPECT_EQ(ledger->current()[MemoryKind::parameters], 140);
    EXPECT_EQ(ledger->device_current()[MemoryKind::parameters], 40);
  }
  EXPECT_EQ(ledger->device_current()[MemoryKind::parameters], 0);
  EXPECT_EQ(ledger->device_peak()[MemoryKind::parameters], 40);
  EXPECT_EQ(ledger->peak()[MemoryKind::parameters], 140);
  MemoryCharge state(ledger, MemoryKind::optimizer_state, 8, MemorySide::device);
  ledger->set(MemoryKind::optimizer_state, 30, MemorySide::device);
  ledger->set(MemoryKind::optimizer_state, 20, MemorySide::device);
  EXPECT_EQ(ledger->current()[MemoryKind::optimizer_state], 28);
  EXPECT_EQ(ledger->device_current()[MemoryKind::optimizer_state], 28);
  ledger->reset_peaks();
  EXPECT_EQ(ledger->device_peak()[MemoryKind::parameters], 0);
  EXPECT_EQ(ledger->device_peak()[MemoryKind::optimizer_state], 28);
}

}  // namespace
}  // namespace troupe
