// The pipeline's layout: where each rank sits in the dp × pp grid (derived alike by every
// rank), and how a layer sequence is cut into stages (uniform, balanced by cost, explicit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "pipeline/partition.hpp"
#include "pipeline/topology.hpp"

namespace troupe::pipeline {
namespace {

using Counts = std::vector<int64_t>;

TEST(PipelineTopology, PipelineFirstOrderPutsAPipelinesStagesOnConsecutiveRanks) {
  Grid grid{2, 4, GridOrder::pp_fastest, 1};  // ranks 0-3 one pipeline, 4-7 the other
  auto p5 = place(grid, 5);
  ASSERT_TRUE(p5.ok());
  EXPECT_EQ(p5->stage, 1);
  EXPECT_EQ(p5->replica, 1);
  EXPECT_EQ(p5->data_parallel_group, (Counts{1, 5}));
  EXPECT_EQ(p5->pipeline, (Counts{4, 5, 6, 7}));
  EXPECT_EQ(p5->previous, 4);
  EXPECT_EQ(p5->next, 6);
  auto first = place(grid, 0), last = place(grid, 3);
  EXPECT_EQ(first->previous, -1);
  EXPECT_EQ(last->next, -1);
}

TEST(PipelineTopology, DataParallelFirstOrderPutsAStagesReplicasOnConsecutiveRanks) {
  Grid grid{2, 4, GridOrder::dp_fastest, 1};  // stage s on ranks 2s, 2s + 1
  auto p5 = place(grid, 5);
  ASSERT_TRUE(p5.ok());
  EXPECT_EQ(p5->stage, 2);
  EXPECT_EQ(p5->replica, 1);
  EXPECT_EQ(p5->data_parallel_group, (Counts{4, 5}));
  EXPECT_EQ(p5->pipeline, (Counts{1, 3, 5, 7}));
  EXPECT_EQ(p5->previous, 3);
  EXPECT_EQ(p5->next, 7);
}

// Every rank appears once in the grid, in one data-parallel group per stage and shard, and
// each rank's neighbours name it back; a tensor-parallel group is tp consecutive ranks.
TEST(PipelineTopology, EveryRankHasOnePlaceAndItsNeighboursAgree) {
  for (GridOrder order : {GridOrder::pp_fastest, GridOrder::dp_fastest})
    for (int64_t dp : {1, 2, 3})
      for (int64_t pp : {1, 2, 4})
        for (int64_t tp : {1, 2, 4}) {
          Grid grid{dp, pp, order, tp};
          std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
          for (int64_t r = 0; r < grid.world_size(); ++r) {
            auto p = place(grid, r);
            ASSERT_TRUE(p.ok());
            EXPECT_EQ(grid.rank_of(p->stage, p->replica, p->shard), r);
            EXPECT_TRUE(seen.insert({p->stage, p->replica, p->shard}).second);
            EXPECT_EQ(p->data_parallel_group[static_cast<std::size_t>(p->replica)], r);
            EXPECT_EQ(p->tensor_parallel_group[static_cast<std::size_t>(p->shard)], r);
            EXPECT_EQ(p->tensor_parallel_group.front(), r - p->shard);  // consecutive ranks
            EXPECT_EQ(p->pipeline[static_cast<std::size_t>(p->stage)], r);
            for (int64_t member : p->data_parallel_group) EXPECT_EQ(place(grid, member)->shard, p->shard);
            if (p->next >= 0) {
              EXPECT_EQ(place(grid, p->next)->previous, r);
              EXPECT_EQ(place(grid, p->next)->shard, p->shard);
            }
          }
        }
}

// A bad [parallel] order is the config loader's to refuse (config_test).
TEST(PipelineTopology, RanksOutsideTheGridAreRefused) {
  EXPECT_STREQ(grid_order_name(GridOrder::pp_fastest), "pp,dp");
  EXPECT_STREQ(grid_order_name(GridOrder::dp_fastest), "dp,pp");
  auto outside = place(Grid{2, 2, GridOrder::pp_fastest, 1}, 4);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.error().message, "rank 4 is outside the grid of dp 2 × pp 2 × tp 1 = 4 ranks");
}

TEST(PipelinePartition, UniformGivesTheFirstStagesTheRemainder) {
  EXPECT_EQ(*partition_uniform(10, 4), (Counts{3, 3, 2, 2}));
  EXPECT_EQ(*partition_uniform(8, 4), (Counts{2, 2, 2, 2}));
  auto few = partition_uniform(3, 4);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.error().message, "4 stages for 3 layers: every stage needs at least one layer");
}

// The cut minimises the costliest stage: checked against every cut of a small sequence.
TEST(PipelinePartition, BalancedFindsTheCutWhoseCostliestStageCostsLeast) {
  const std::vector<double> costs = {5, 1, 1, 1, 8, 2, 2, 3, 1, 6};
  for (int64_t stages : {1, 2, 3, 4, 5, 10}) {
    auto counts = partition_balanced(costs, stages);
    ASSERT_TRUE(counts.ok());
    ASSERT_TRUE(check_partition(*counts, 10, stages).ok());
    auto costliest = [&](const Counts& c) {
      double worst = 0;
      std::size_t at = 0;
      for (int64_t n : c) {
        worst = std::max(
            worst, std::accumulate(costs.begin() + static_cast<long>(at),
                                   costs.begin() + static_cast<long>(at + static_cast<std::size_t>(n)), 0.0));
        at += static_cast<std::size_t>(n);
      }
      return worst;
    };
    // Every cut into `stages` non-empty parts: choose the stages − 1 boundaries among 9.
    double best = 1e300;
    for (unsigned mask = 0; mask < (1u << 9); ++mask) {
      if (__builtin_popcount(mask) != stages - 1) continue;
      Counts c;
      int64_t run = 1;
      for (int b = 0; b < 9; ++b, ++run)
        if (mask & (1u << b)) {
          c.push_back(run);
          run = 0;
        }
      c.push_back(run);
      best = std::min(best, costliest(c));
    }
    EXPECT_DOUBLE_EQ(costliest(*counts), best) << stages << " stages";
  }
  // Equal costs: the uniform cut.
  EXPECT_EQ(*partition_balanced(std::vector<double>(8, 1.0), 4), (Counts{2, 2, 2, 2}));
  EXPECT_FALSE(partition_balanced({1, -1, 1}, 2).ok());
  EXPECT_FALSE(partition_balanced({1, INFINITY, 1}, 2).ok());
}

TEST(PipelinePartition, AnExplicitListMustCutTheModelExactly) {
  EXPECT_TRUE(check_partition({2, 3, 1}, 6, 3).ok());
  EXPECT_EQ(check_partition({2, 3}, 6, 3).error().message,
            "2 layer counts for 3 stages: give one count per stage");
  EXPECT_EQ(check_partition({2, 3, 2}, 6, 3).error().message,
            "the counts [2, 3, 2] add up to 7 layers, but the model has 6");
  EXPECT_EQ(check_partition({3, 0, 3}, 6, 3).error().message,
            "stage 1 has 0 layers: every stage needs at least one");
}

}  // namespace
}  // namespace troupe::pipeline
