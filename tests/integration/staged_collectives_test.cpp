// Collectives staged through host memory (actors/staged_comm.hpp) between real processes
// over UCX: every rank's results exact, its own block where it belongs (staged_rank.cpp).
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

void expect_staged_collectives_match(int world) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " launch --ranks " + std::to_string(world) +
                                    " -- " + STAGED_RANK_BINARY + " " + std::to_string(testing::free_port()),
                                120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < world; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": staged collectives match"), std::string::npos)
        << r.output;
}

TEST(StagedCollectives, TwoRanksMatchExactly) {
  expect_staged_collectives_match(2);
}

TEST(StagedCollectives, ThreeRanksMatchExactly) {
  expect_staged_collectives_match(3);
}

}  // namespace
}  // namespace troupe
