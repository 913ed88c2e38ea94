// detect_rank_environment: launcher precedence, defaults and the errors users see.
#include "runtime/launch/environment.hpp"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace troupe {
namespace {

EnvLookup fake(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const std::string& name) -> std::optional<std::string> {
    auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

RankEnvironment detect_ok(std::map<std::string, std::string> variables) {
  auto result = detect_rank_environment(fake(std::move(variables)));
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
  if (!result.ok() || !result->has_value()) {
    ADD_FAILURE() << "expected a rank environment";
    return {};
  }
  return **result;
}

std::string detect_error(std::map<std::string, std::string> variables) {
  auto result = detect_rank_environment(fake(std::move(variables)));
  if (result.ok()) {
    ADD_FAILURE() << "expected an error";
    return {};
  }
  return result.error().message;
}

TEST(RankEnvironment, NoLauncherVariablesMeansSingleProcess) {
  auto result = detect_rank_environment(fake({{"HOME", "/root"}, {"MASTER_ADDR", "x"}}));
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->has_value());
}

TEST(RankEnvironment, ReadsTroupeVariables) {
  auto env = detect_ok({{"TROUPE_RANK", "3"},
                        {"TROUPE_WORLD_SIZE", "8"},
                        {"TROUPE_LOCAL_RANK", "1"},
                        {"TROUPE_LOCAL_WORLD_SIZE", "2"},
                        {"TROUPE_COORDINATOR", "10.0.0.1:29500"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.coordinator, "10.0.0.1:29500");
  EXPECT_EQ(env.source, "TROUPE_RANK/TROUPE_WORLD_SIZE");
}

TEST(RankEnvironment, TroupeTakesPrecedenceOverTorchrun) {
  auto env = detect_ok({{"TROUPE_RANK", "1"},
                        {"TROUPE_WORLD_SIZE", "2"},
                        {"RANK", "5"},
                        {"WORLD_SIZE", "6"},
                        {"MASTER_ADDR", "h"},
                        {"MASTER_PORT", "1"}});
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.coordinator, "");
  EXPECT_EQ(env.source, "TROUPE_RANK/TROUPE_WORLD_SIZE");
}

TEST(RankEnvironment, ReadsTorchrunVariablesWithMasterAsCoordinator) {
  auto env = detect_ok({{"RANK", "5"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "node0"},
                        {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.coordinator, "node0:29500");
  EXPECT_EQ(env.source, "RANK/WORLD_SIZE");
}

TEST(RankEnvironment, BracketsAnIpv6MasterAddress) {
  auto env =
      detect_ok({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "::1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.coordinator, "[::1]:29500");
}

TEST(RankEnvironment, TorchrunTakesPrecedenceOverOpenMpi) {
  auto env = detect_ok(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.source, "RANK/WORLD_SIZE");
}

TEST(RankEnvironment, ReadsOpenMpiVariables) {
  auto env = detect_ok({{"OMPI_COMM_WORLD_RANK", "3"},
                        {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                        {"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.source, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
}

TEST(RankEnvironment, ReadsSlurmVariables) {
  auto env = detect_ok(
      {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "4"}});
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.coordinator, "");
  EXPECT_EQ(env.source, "SLURM_PROCID/SLURM_NTASKS");
}

TEST(RankEnvironment, IgnoresSlurmTasksPerNodeThatIsNotAPlainInteger) {
  auto env = detect_ok({{"SLURM_PROCID", "5"},
                        {"SLURM_NTASKS", "6"},
                        {"SLURM_LOCALID", "1"},
                        {"SLURM_NTASKS_PER_NODE", "2(x3)"}});
  EXPECT_EQ(env.local_world_size, 6);
}

TEST(RankEnvironment, LocalRankAndLocalWorldSizeDefaultToGlobal) {
  auto env = detect_ok({{"TROUPE_RANK", "2"}, {"TROUPE_WORLD_SIZE", "4"}});
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world_size, 4);
}

TEST(RankEnvironment, EmptyVariableCountsAsUnset) {
  auto env = detect_ok({{"TROUPE_RANK", ""}, {"TROUPE_WORLD_SIZE", ""}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(env.source, "RANK/WORLD_SIZE");
}

TEST(RankEnvironment, LowerFamilyIsNotCheckedWhenAHigherOneIsPresent) {
  auto env = detect_ok({{"TROUPE_RANK", "0"}, {"TROUPE_WORLD_SIZE", "1"}, {"RANK", "oops"}});
  EXPECT_EQ(env.rank, 0);
}

TEST(RankEnvironment, NonIntegerRankIsAnError) {
  auto message = detect_error({{"TROUPE_RANK", "two"}, {"TROUPE_WORLD_SIZE", "4"}});
  EXPECT_NE(message.find("TROUPE_RANK"), std::string::npos) << message;
  EXPECT_NE(message.find("'two'"), std::string::npos) << message;
  EXPECT_NE(message.find("not an integer"), std::string::npos) << message;
}

TEST(RankEnvironment, TrailingGarbageIsNotAnInteger) {
  auto message = detect_error({{"RANK", "1x"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(message.find("RANK is '1x'"), std::string::npos) << message;
}

TEST(RankEnvironment, NegativeRankIsAnError) {
  auto message = detect_error({{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(message.find("OMPI_COMM_WORLD_RANK is -1"), std::string::npos) << message;
  EXPECT_NE(message.find("at least 0"), std::string::npos) << message;
}

TEST(RankEnvironment, ZeroWorldSizeIsAnError) {
  auto message = detect_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}});
  EXPECT_NE(message.find("SLURM_NTASKS is 0"), std::string::npos) << message;
  EXPECT_NE(message.find("at least 1"), std::string::npos) << message;
}

TEST(RankEnvironment, RankNotBelowWorldSizeIsAnError) {
  auto message = detect_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(message.find("RANK is 4"), std::string::npos) << message;
  EXPECT_NE(message.find("less than WORLD_SIZE (4)"), std::string::npos) << message;
}

TEST(RankEnvironment, RankWithoutWorldSizeIsAnError) {
  auto message = detect_error({{"TROUPE_RANK", "0"}});
  EXPECT_NE(message.find("TROUPE_RANK is set (0) but TROUPE_WORLD_SIZE is not"), std::string::npos)
      << message;
}

TEST(RankEnvironment, WorldSizeWithoutRankIsAnError) {
  auto message = detect_error({{"WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("WORLD_SIZE is set (2) but RANK is not"), std::string::npos) << message;
}

TEST(RankEnvironment, LocalRankNotBelowLocalWorldSizeIsAnError) {
  auto message =
      detect_error({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("LOCAL_RANK is 2"), std::string::npos) << message;
}

TEST(RankEnvironment, LocalWorldSizeAboveWorldSizeIsAnError) {
  auto message =
      detect_error({{"TROUPE_RANK", "0"}, {"TROUPE_WORLD_SIZE", "2"}, {"TROUPE_LOCAL_WORLD_SIZE", "3"}});
  EXPECT_NE(message.find("TROUPE_LOCAL_WORLD_SIZE is 3"), std::string::npos) << message;
}

TEST(RankEnvironment, MasterAddrWithoutPortIsAnError) {
  auto message = detect_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "node0"}});
  EXPECT_NE(message.find("MASTER_ADDR is set (node0) but MASTER_PORT is not"), std::string::npos) << message;
}

TEST(RankEnvironment, MasterPortWithoutAddrIsAnError) {
  auto message = detect_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "29500"}});
  EXPECT_NE(message.find("MASTER_PORT is set (29500) but MASTER_ADDR is not"), std::string::npos) << message;
}

TEST(RankEnvironment, BadMasterPortIsAnError) {
  for (const char* port : {"0", "65536", "http", "-5"}) {
    auto message =
        detect_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", port}});
    EXPECT_NE(message.find(std::string("MASTER_PORT is '") + port + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("from 1 to 65535"), std::string::npos) << message;
  }
}

TEST(RankEnvironment, MalformedTroupeCoordinatorIsAnError) {
  for (const char* coordinator : {"node0", "node0:", ":29500", "node0:99999"}) {
    auto message =
        detect_error({{"TROUPE_RANK", "0"}, {"TROUPE_WORLD_SIZE", "1"}, {"TROUPE_COORDINATOR", coordinator}});
    EXPECT_NE(message.find(std::string("TROUPE_COORDINATOR is '") + coordinator + "'"), std::string::npos)
        << message;
  }
}

TEST(RankEnvironment, ProcessEnvironmentReadsRealVariables) {
  ASSERT_EQ(::setenv("TROUPE_ENVIRONMENT_TEST_PROBE", "yes", 1), 0);
  EnvLookup lookup = process_environment();
  EXPECT_EQ(lookup("TROUPE_ENVIRONMENT_TEST_PROBE"), std::optional<std::string>("yes"));
  ::unsetenv("TROUPE_ENVIRONMENT_TEST_PROBE");
  EXPECT_EQ(lookup("TROUPE_ENVIRONMENT_TEST_PROBE"), std::nullopt);
}

}  // namespace
}  // namespace troupe
