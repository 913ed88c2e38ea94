// Resharding on load: what a rank owns under one layout is read from ranges saved under
// another, every element exactly once, and a gap is named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/checkpoint_ranges.hpp"

namespace troupe {
namespace {

// A parameter of 1000 elements saved by 4 ranks, 250 each, each rank's file holding its
// block after 100 elements of something else.
std::vector<SavedRange> saved_by_four() {
  std::vector<SavedRange> saved;
  for (std::size_t r = 0; r < 4; ++r)
    saved.push_back(SavedRange{"w", 250 * r, 250, "rank" + std::to_string(r) + ".bin", 100});
  return saved;
}

TEST(CheckpointRanges, TwoRanksReadTheirHalvesAcrossTheFourFilesThatHoldThem) {
  auto reads = plan_reads(saved_by_four(), {WantedRange{"w", 500, 500, 0}});
  ASSERT_TRUE(reads.ok()) << reads.error().message;
  ASSERT_EQ(reads->size(), 2u);
  EXPECT_EQ((*reads)[0].file, "rank2.bin");
  EXPECT_EQ((*reads)[0].from, 100u);
  EXPECT_EQ((*reads)[0].count, 250u);
  EXPECT_EQ((*reads)[0].into, 0u);
  EXPECT_EQ((*reads)[1].file, "rank3.bin");
  EXPECT_EQ((*reads)[1].into, 250u);
}

TEST(CheckpointRanges, ARangeAcrossABoundaryStartsInsideTheFirstBlock) {
  auto reads = plan_reads(saved_by_four(), {WantedRange{"w", 200, 100, 7}});
  ASSERT_TRUE(reads.ok());
  ASSERT_EQ(reads->size(), 2u);
  EXPECT_EQ((*reads)[0].file, "rank0.bin");
  EXPECT_EQ((*reads)[0].from, 300u);  // 100 + (200 - 0)
  EXPECT_EQ((*reads)[0].count, 50u);
  EXPECT_EQ((*reads)[0].into, 7u);
  EXPECT_EQ((*reads)[1].file, "rank1.bin");
  EXPECT_EQ((*reads)[1].from, 100u);
  EXPECT_EQ((*reads)[1].count, 50u);
  EXPECT_EQ((*reads)[1].into, 57u);
}

TEST(CheckpointRanges, ReplicasSavingTheSameRangeAreReadOnceFromTheFirst) {
  std::vector<SavedRange> saved = {{"b", 0, 64, "rank0.bin", 0}, {"b", 0, 64, "rank1.bin", 0}};
  auto reads = plan_reads(saved, {WantedRange{"b", 0, 64, 0}});
  ASSERT_TRUE(reads.ok());
  ASSERT_EQ(reads->size(), 1u);
  EXPECT_EQ((*reads)[0].file, "rank0.bin");
}

TEST(CheckpointRanges, AdjacentReadsOfOneFileMerge) {
  std::vector<SavedRange> saved = {{"a", 0, 10, "f.bin", 0}, {"a", 10, 10, "f.bin", 10}};
  auto reads = plan_reads(saved, {WantedRange{"a", 0, 20, 0}});
  ASSERT_TRUE(reads.ok());
  ASSERT_EQ(reads->size(), 1u);
  EXPECT_EQ((*reads)[0].count, 20u);
}

TEST(CheckpointRanges, AGapOrAnUnknownParameterIsNamed) {
  std::vector<SavedRange> saved = saved_by_four();
  saved.erase(saved.begin() + 1);  // rank 1's file is lost
  auto reads = plan_reads(saved, {WantedRange{"w", 0, 1000, 0}});
  ASSERT_FALSE(reads.ok());
  EXPECT_NE(reads.error().message.find("no value for elements [250, 1000) of parameter 'w'"),
            std::string::npos)
      << reads.error().message;
  reads = plan_reads(saved_by_four(), {WantedRange{"head.weight", 0, 4, 0}});
  ASSERT_FALSE(reads.ok());
  EXPECT_NE(reads.error().message.find("elements [0, 4) of parameter 'head.weight'"), std::string::npos);
}

// Overlapping saved ranges (replicas, and a range across two others) each element read once.
TEST(CheckpointRanges, OverlapsAreReadOnceFromTheRangeStartingFirst) {
  std::vector<SavedRange> saved = {{"w", 0, 100, "a.bin", 0},
                                   {"w", 50, 100, "b.bin", 0},
                                   {"w", 60, 10, "c.bin", 0},
                                   {"w", 150, 50, "d.bin", 0}};
  auto reads = plan_reads(saved, {WantedRange{"w", 40, 160, 0}});
  ASSERT_TRUE(reads.ok()) << reads.error().message;
  ASSERT_EQ(reads->size(), 3u);
  EXPECT_EQ((*reads)[0].file, "a.bin");
  EXPECT_EQ((*reads)[0].count, 60u);
  EXPECT_EQ((*reads)[1].file, "b.bin");
  EXPECT_EQ((*reads)[1].from, 50u);  // element 100 is b's 50th
  EXPECT_EQ((*reads)[1].count, 50u);
  EXPECT_EQ((*reads)[2].file, "d.bin");
}

// A row-parallel weight [4, 6] in 2 column slices: shard 1 holds columns 3-5 of each row.
TEST(CheckpointRanges, AColumnSliceIsOneRunPerRowOfTheWholeTensor) {
  const TensorShard shard{{4, 6}, 1, 1, 1, 2};
  auto runs = whole_runs(shard, 0, 12);
  ASSERT_EQ(runs.size(), 4u);
  for (std::size_t row = 0; row < 4; ++row) {
    EXPECT_EQ(runs[row].whole_offset, 6 * row + 3);
    EXPECT_EQ(runs[row].count, 3u);
    EXPECT_EQ(runs[row].shard_offset, 3 * row);
  }
  // A part of it starting and ending inside rows.
  runs = whole_runs(shard, 2, 5);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].whole_offset, 5u);
  EXPECT_EQ(runs[0].count, 1u);
  EXPECT_EQ(runs[1].whole_offset, 9u);
  EXPECT_EQ(runs[1].count, 3u);
  EXPECT_EQ(runs[1].shard_offset, 3u);
  EXPECT_EQ(runs[2].whole_offset, 15u);
  EXPECT_EQ(runs[2].count, 1u);
}

// A fused q/k/v weight [6, 2] (three blocks of 2 rows) in 2 row slices: shard 1 holds
// row 1 of each block.
TEST(CheckpointRanges, AFusedProjectionsShardIsItsSliceOfEachBlock) {
  auto runs = whole_runs(TensorShard{{6, 2}, 0, 3, 1, 2}, 0, 6);
  ASSERT_EQ(runs.size(), 3u);
  for (std::size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(runs[b].whole_offset, 4 * b + 2);
    EXPECT_EQ(runs[b].count, 2u);
    EXPECT_EQ(runs[b].shard_offset, 2 * b);
  }
}

// Every shard's runs of a 3-d tensor cover each whole element exactly once, whatever
// dimension is split and into how many blocks and parts.
TEST(CheckpointRanges, TheShardsOfATensorCoverItExactlyOnce) {
  for (int64_t dim = 0; dim < 3; ++dim)
    for (int64_t blocks : {1, 2})
      for (int64_t parts : {1, 2, 4}) {
        std::vector<int64_t> shape = {4, 8, 3};
        shape[static_cast<std::size_t>(dim)] = 8 * blocks;
        std::vector<int> seen(static_cast<std::size_t>(shape[0] * shape[1] * shape[2]));
        for (int64_t index = 0; index < parts; ++index) {
          const TensorShard shard{shape, dim, blocks, index, parts};
          const std::size_t held = seen.size() / static_cast<std::size_t>(parts);
          std::size_t next = 0;
          for (const ShardRun& r : whole_runs(shard, 0, held)) {
            EXPECT_EQ(r.shard_offset, next);
            next += r.count;
            for (std::size_t e = 0; e < r.count; ++e) ++seen.at(r.whole_offset + e);
          }
          EXPECT_EQ(next, held);
        }
        for (std::size_t e = 0; e < seen.size(); ++e)
          ASSERT_EQ(seen[e], 1) << "element " << e << ", dim " << dim << ", blocks " << blocks << ", parts "
                                << parts;
      }
}

}  // namespace
}  // namespace troupe
