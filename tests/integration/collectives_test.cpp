// Collectives over the real UCX transport between real processes: world sizes 1-4,
// seeded random sizes including 0, 1, odd and larger than a chunk (transport_rank.cpp).
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/command.hpp"

namespace troupe {
namespace {

void expect_collectives_match(int world, int port, int seed) {
  std::string command = std::string(TROUPE_BINARY) + " launch --ranks " + std::to_string(world) + " -- " +
                        TRANSPORT_RANK_BINARY + " " + std::to_string(port) + " " + std::to_string(seed);
  auto r = testing::run_command(command, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < world; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": all collectives match"), std::string::npos)
        << r.output;
}

TEST(Collectives, OneRankIsItsOwnResult) {
  expect_collectives_match(1, 29701, 11);
}
TEST(Collectives, TwoRanksMatchExactSums) {
  expect_collectives_match(2, 29702, 12);
}
TEST(Collectives, ThreeRanksMatchExactSums) {
  expect_collectives_match(3, 29703, 13);
}
TEST(Collectives, FourRanksMatchExactSums) {
  expect_collectives_match(4, 29704, 14);
}
TEST(Collectives, FiveRanksMatchExactSums) {
  expect_collectives_match(5, 29705, 15);
}
TEST(Collectives, EightRanksMatchExactSums) {
  expect_collectives_match(8, 29708, 18);
}

TEST(Collectives, RanksIssuingDifferentCallsGetAnErrorNotAHang) {
  std::string command = std::string(TROUPE_BINARY) + " launch --ranks 2 -- " + TRANSPORT_RANK_BINARY + " 29709 1 mismatch";
  auto r = testing::run_command(command, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Whichever rank notices first names the other and tells it why.
  EXPECT_NE(r.output.find("rank 0: rank 1 stopped the job: rank 0 sent"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("issued different calls"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("did not complete within"), std::string::npos) << "caught by the timeout, not the check: "
                                                                         << r.output;
}

}  // namespace
}  // namespace troupe
