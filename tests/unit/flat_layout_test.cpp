// FlatLayout: the partition arithmetic of ZeRO, checked on its own.
#include <gtest/gtest.h>

#include <random>

#include "memory/flat_layout.hpp"

namespace troupe {
namespace {

TEST(FlatLayout, ParametersStartAlignedInOrderWithoutOverlap) {
  auto layout = FlatLayout::make({5, 16, 1, 33}, 2, 16);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->offset(0), 0u);
  EXPECT_EQ(layout->offset(1), 16u);
  EXPECT_EQ(layout->offset(2), 32u);
  EXPECT_EQ(layout->offset(3), 48u);
}

TEST(FlatLayout, PageAlignedBlocksLeaveParametersPackedAndRowsAddUp) {
  // Blocks on 1024-element pages (the parameter swap's O_DIRECT reads); parameters stay 16-aligned.
  auto layout = FlatLayout::make({5, 3000, 40}, 3, 16, {0, 1}, 1024);
  ASSERT_TRUE(layout.ok()) << layout.error().message;
  EXPECT_EQ(layout->offset(2) - layout->offset(1), 3008u)
      << "parameters inside a row keep the element alignment";
  std::size_t sum = 0;
  for (std::size_t k = 0; k < layout->row_count(); ++k) {
    EXPECT_EQ(layout->row(k).block % 1024, 0u) << "row " << k;
    EXPECT_EQ(layout->row_elements(k), layout->row(k).block * 3) << "row " << k;
    EXPECT_EQ(layout->row_sizes()[k], layout->row_elements(k));
    sum += layout->row_elements(k);
  }
  EXPECT_EQ(sum, layout->total());
  EXPECT_FALSE(FlatLayout::make({5}, 2, 16, {}, 1000).ok()) << "a block alignment not a multiple of 16";
}

TEST(FlatLayout, TotalDividesIntoEqualAlignedPartitions) {
  for (int64_t parts : {1, 2, 3, 4, 7, 8}) {
    auto layout = FlatLayout::make({100, 3, 250, 1}, parts, 16);
    ASSERT_TRUE(layout.ok());
    EXPECT_EQ(layout->total() % static_cast<std::size_t>(parts), 0u);
    EXPECT_EQ(layout->partition_size() % 16, 0u) << "partition starts stay aligned";
    EXPECT_GE(layout->total(), layout->offset(3) + layout->count(3));
    EXPECT_LT(layout->total() - (layout->offset(3) + layout->count(3)), static_cast<std::size_t>(parts) * 16)
        << "padding is less than one aligned unit per partition";
  }
}

TEST(FlatLayout, AParameterStraddlingOwnersIsCutAtTheBoundary) {
  auto layout = FlatLayout::make({40, 40}, 2, 8);  // total 80: partitions [0,40) [40,80)
  ASSERT_TRUE(layout.ok());
  auto first = layout->pieces_of(0);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].owner, 0);
  auto layout3 = FlatLayout::make({40, 40}, 3, 8);  // total 96: partitions of 32
  ASSERT_TRUE(layout3.ok());
  auto pieces = layout3->pieces_of(1);  // elements [40, 80)
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].owner, 1);
  EXPECT_EQ(pieces[0].parameter_offset, 0u);
  EXPECT_EQ(pieces[0].count, 24u);  // [40, 64)
  EXPECT_EQ(pieces[1].owner, 2);
  EXPECT_EQ(pieces[1].parameter_offset, 24u);
  EXPECT_EQ(pieces[1].count, 16u);  // [64, 80)
}

TEST(FlatLayout, PiecesTileEveryParameterAndEveryPartitionExactlyOnce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> counts(std::uniform_int_distribution<int>(0, 12)(rng));
    for (auto& c : counts) c = std::uniform_int_distribution<std::size_t>(0, 300)(rng);
    int64_t parts = std::uniform_int_distribution<int64_t>(1, 9)(rng);
    std::size_t align = std::size_t{1} << std::uniform_int_distribution<int>(0, 5)(rng);
    auto layout = FlatLayout::make(counts, parts, align);
    ASSERT_TRUE(layout.ok());
    std::vector<int> covered(layout->total(), 0);
    for (std::size_t p = 0; p < counts.size(); ++p) {
      std::size_t seen = 0;
      for (const auto& piece : layout->pieces_of(p)) {
        EXPECT_EQ(piece.parameter_offset, seen);
        EXPECT_EQ(piece.flat_offset, layout->offset(p) + seen);
        EXPECT_EQ(layout->owner_of(piece.flat_offset), piece.owner);
        EXPECT_EQ(layout->owner_of(piece.flat_offset + piece.count - 1), piece.owner);
        for (std::size_t i = 0; i < piece.count; ++i) covered[piece.flat_offset + i]++;
        seen += piece.count;
      }
      EXPECT_EQ(seen, counts[p]);
    }
    std::vector<int> by_partition(layout->total(), 0);
    for (int64_t r = 0; r < parts; ++r)
      for (const auto& piece : layout->pieces_in(r)) {
        EXPECT_EQ(piece.owner, r);
        EXPECT_GE(piece.flat_offset, layout->block_begin(0, r));
        EXPECT_LE(piece.flat_offset + piece.count, layout->block_begin(0, r) + layout->row(0).block);
        EXPECT_EQ(piece.partition_offset, piece.flat_offset - layout->block_begin(0, r));
        for (std::size_t i = 0; i < piece.count; ++i) by_partition[piece.flat_offset + i]++;
      }
    EXPECT_EQ(covered, by_partition) << "both views cover the same elements, once each";
    for (int c : covered) ASSERT_LE(c, 1);
  }
}

TEST(FlatLayout, RowsDivideIntoOneAlignedBlockPerRank) {
  // Three rows: {0,1}, {2}, {3}; each padded to a multiple of partitions × align.
  auto layout = FlatLayout::make({10, 20, 7, 50}, 3, 4, {2, 3});
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->row_count(), 3u);
  EXPECT_EQ(layout->row(0).begin, 0u);
  EXPECT_EQ(layout->row(0).block, 12u);  // 12 + 20 = 32 used -> 36 = 3 × 12
  EXPECT_EQ(layout->row(1).begin, 36u);
  EXPECT_EQ(layout->row(1).block, 4u);  // 7 -> 12
  EXPECT_EQ(layout->row(2).begin, 48u);
  EXPECT_EQ(layout->row(2).block, 20u);  // 50 -> 60
  EXPECT_EQ(layout->total(), 108u);
  EXPECT_EQ(layout->partition_size(), 36u);
  EXPECT_EQ(layout->row(2).partition_offset, 16u);
  EXPECT_EQ(layout->largest_row(), 60u);
  EXPECT_EQ(layout->row_of_parameter(1), 0u);
  EXPECT_EQ(layout->row_of_parameter(3), 2u);
  EXPECT_EQ(layout->offset(2), 36u);
  EXPECT_EQ(layout->owner_of(48 + 20), 1);
  EXPECT_EQ(layout->row_of(47), 1u);
  // Parameter 3 spans all three blocks of its row.
  auto pieces = layout->pieces_of(3);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1].owner, 1);
  EXPECT_EQ(pieces[1].parameter_offset, 20u);
  EXPECT_EQ(pieces[1].partition_offset, 16u);
  EXPECT_EQ(pieces[2].count, 10u);
}

TEST(FlatLayout, BucketedRowsHoldAtMostTheLimitUnlessOneParameterIsLarger) {
  auto layout = FlatLayout::make_bucketed({30, 30, 30, 200, 10}, 2, 64, 1);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->row_count(), 4u);  // {30,30} {30} {200} {10}
  EXPECT_EQ(layout->row(0).parameter_count, 2u);
  EXPECT_EQ(layout->row(2).first_parameter, 3u);
  EXPECT_EQ(layout->row(2).block, 100u);
  EXPECT_EQ(layout->row(3).first_parameter, 4u);
}

TEST(FlatLayout, AParameterMarkedAloneHasARowToItselfWhateverTheLimit) {
  auto layout = FlatLayout::make_bucketed({30, 30, 30}, 2, 100, 1, {false, true, false});
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->row_count(), 3u);  // {30} {30} {30}: the middle one alone cuts both sides
  EXPECT_EQ(layout->row(1).first_parameter, 1u);
  EXPECT_EQ(layout->row(1).parameter_count, 1u);
}

TEST(FlatLayout, RowedPiecesTileEveryParameterAndEveryPartitionExactlyOnce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> counts(std::uniform_int_distribution<int>(1, 12)(rng));
    for (auto& c : counts) c = std::uniform_int_distribution<std::size_t>(0, 300)(rng);
    int64_t parts = std::uniform_int_distribution<int64_t>(1, 9)(rng);
    std::size_t limit = std::uniform_int_distribution<std::size_t>(1, 600)(rng);
    auto layout = FlatLayout::make_bucketed(counts, parts, limit, 4);
    ASSERT_TRUE(layout.ok());
    std::vector<int> covered(layout->total(), 0);
    std::vector<std::vector<int>> slots(static_cast<std::size_t>(parts),
                                        std::vector<int>(layout->partition_size(), 0));
    for (std::size_t p = 0; p < counts.size(); ++p) {
      std::size_t seen = 0;
      for (const auto& piece : layout->pieces_of(p)) {
        EXPECT_EQ(layout->owner_of(piece.flat_offset), piece.owner);
        std::size_t k = layout->row_of_parameter(p);
        EXPECT_EQ(piece.flat_offset - layout->block_begin(k, piece.owner) + layout->row(k).partition_offset,
                  piece.partition_offset);
        for (std::size_t i = 0; i < piece.count; ++i) {
          covered[piece.flat_offset + i]++;
          slots[static_cast<std::size_t>(piece.owner)][piece.partition_offset + i]++;
        }
        seen += piece.count;
      }
      EXPECT_EQ(seen, counts[p]);
    }
    std::size_t by_partition = 0;
    for (int64_t r = 0; r < parts; ++r)
      for (const auto& piece : layout->pieces_in(r)) {
        EXPECT_EQ(piece.owner, r);
        by_partition += piece.count;
      }
    std::size_t total = 0;
    for (auto c : counts) total += c;
    EXPECT_EQ(by_partition, total);
    for (int c : covered) ASSERT_LE(c, 1);
    for (const auto& s : slots)
      for (int c : s) ASSERT_LE(c, 1);
  }
}

TEST(FlatLayout, NoParametersStillGivesEveryPartitionAnAlignedUnit) {
  auto layout = FlatLayout::make({}, 4, 16);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->partition_size(), 16u);
  EXPECT_TRUE(layout->pieces_in(2).empty());
}

TEST(FlatLayout, NonPositivePartitionsAreRefused) {
  auto layout = FlatLayout::make({10}, 0);
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.error().message.find("at least one partition"), std::string::npos);
}

}  // namespace
}  // namespace troupe
