// Collectives over the real UCX transport between real processes: world sizes 1-4,
// seeded random sizes including 0, 1, odd and larger than a chunk (transport_rank.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

void expect_collectives_match(int world, int seed, const std::string& env = "") {
  std::string command = env + std::string(TROUPE_BINARY) + " launch --ranks " + std::to_string(world) +
                        " -- " + TRANSPORT_RANK_BINARY + " " + std::to_string(testing::free_port()) + " " +
                        std::to_string(seed);
  auto r = testing::run_command(command, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < world; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": all collectives match"), std::string::npos)
        << r.output;
  bool two_level = env.find("RANKS_PER_HOST") != std::string::npos;
  EXPECT_NE(r.output.find(two_level ? "two-level)" : "flat)"), std::string::npos) << r.output;
}

TEST(Collectives, OneRankIsItsOwnResult) {
  expect_collectives_match(1, 11);
}
TEST(Collectives, TwoRanksMatchExactSums) {
  expect_collectives_match(2, 12);
}
TEST(Collectives, ThreeRanksMatchExactSums) {
  expect_collectives_match(3, 13);
}
TEST(Collectives, FourRanksMatchExactSums) {
  expect_collectives_match(4, 14);
}
TEST(Collectives, FiveRanksMatchExactSums) {
  expect_collectives_match(5, 15);
}
TEST(Collectives, EightRanksMatchExactSums) {
  expect_collectives_match(8, 18);
}

// Two-level all-reduce (within each pretend host, across hosts, within again) gives the
// flat ring's exact sums, for every size the other tests use.
TEST(Collectives, TwoLevelOnTwoHostsOfTwoRanksMatchesExactSums) {
  expect_collectives_match(4, 25, "TROUPE_TEST_RANKS_PER_HOST=2 ");
}
TEST(Collectives, TwoLevelOnThreeHostsOfTwoRanksMatchesExactSums) {
  expect_collectives_match(6, 26, "TROUPE_TEST_RANKS_PER_HOST=2 ");
}
TEST(Collectives, TwoLevelOnTwoHostsOfFourRanksMatchesExactSums) {
  expect_collectives_match(8, 27, "TROUPE_TEST_RANKS_PER_HOST=4 ");
}

TEST(Collectives, RanksIssuingDifferentCallsGetAnErrorNotAHang) {
  std::string command = std::string(TROUPE_BINARY) + " launch --ranks 2 -- " + TRANSPORT_RANK_BINARY + " " +
                        std::to_string(testing::free_port()) + " 1 mismatch";
  auto r = testing::run_command(command, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Whichever rank notices first names the other and tells it why.
  EXPECT_NE(r.output.find("issued another call where this rank issued"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped the job: rank"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("did not complete within"), std::string::npos)
      << "caught by the timeout, not the check: " << r.output;
}

TEST(Collectives, RanksDisagreeingOnCommunicatorMembersGetAnError) {
  std::string command = std::string(TROUPE_BINARY) + " launch --ranks 2 -- " + TRANSPORT_RANK_BINARY + " " +
                        std::to_string(testing::free_port()) + " 1 members";
  auto r = testing::run_command(command, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("asked for a communicator with other members"), std::string::npos) << r.output;
}

// Runs two ranks of transport_rank in MODE without a launcher (which would stop the
// survivor itself); returns rank 0's result and how long it took.
struct Survivor {
  testing::CommandResult rank0;
  double seconds = 0;
};
Survivor run_pair(const std::string& mode) {
  std::string args = std::string(" ") + std::to_string(testing::free_port()) + " 1 " + mode;
  Survivor s;
  auto start = std::chrono::steady_clock::now();
  std::thread other([&] {
    testing::run_command("TROUPE_RANK=1 TROUPE_WORLD_SIZE=2 " + std::string(TRANSPORT_RANK_BINARY) + args,
                         60);
  });
  s.rank0 = testing::run_command(
      "TROUPE_RANK=0 TROUPE_WORLD_SIZE=2 " + std::string(TRANSPORT_RANK_BINARY) + args, 60);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  other.join();
  return s;
}

TEST(Collectives, ACollectiveNotJoinedInTimeFailsNamingTheMissingRank) {
  auto s = run_pair("timeout");
  EXPECT_EQ(s.rank0.exit_code, 0) << s.rank0.output;
  EXPECT_NE(s.rank0.output.find("did not complete within 2 s; still waiting for rank 1"),
            std::string::npos)
      << s.rank0.output;
  EXPECT_LT(s.seconds, 7.0) << "rank 0 must stop at its deadline, before rank 1 leaves";
}

TEST(Collectives, APeerDyingMidCollectiveFailsItOnTheSurvivorNamingTheDeadRank) {
  auto s = run_pair("die");
  EXPECT_EQ(s.rank0.exit_code, 0) << s.rank0.output;
  EXPECT_NE(s.rank0.output.find("rank 1"), std::string::npos) << s.rank0.output;
  EXPECT_LT(s.seconds, 10.0 * TROUPE_TIME_SCALE) << s.rank0.output;
}

}  // namespace
}  // namespace troupe
