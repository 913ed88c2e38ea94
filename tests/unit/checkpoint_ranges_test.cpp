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

}  // namespace
}  // namespace troupe
