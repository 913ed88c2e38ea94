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

// DeepSpeed's launcher says LOCAL_SIZE where torchrun says LOCAL_WORLD_SIZE.
TEST(RankEnvironment, ReadsDeepSpeedsLocalSize) {
  auto env = detect_ok({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_SIZE", "2"}});
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_NE(detect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_SIZE", "3"}}).find("LOCAL_SIZE is 3"),
            std::string::npos);
}

// torchrun's agent serves its store on MASTER_PORT: rank 0 listens on the next port.
TEST(RankEnvironment, UnderTorchrunsAgentStoreTheCoordinatorTakesThePortAfterMasterPort) {
  std::map<std::string, std::string> torchrun = {{"RANK", "0"},
                                                 {"WORLD_SIZE", "2"},
                                                 {"MASTER_ADDR", "10.0.0.5"},
                                                 {"MASTER_PORT", "29500"},
                                                 {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  auto env = detect_ok(torchrun);
  EXPECT_EQ(env.coordinator, "10.0.0.5:29501");
  EXPECT_NE(env.coordinator_source.find("torchrun's agent listens on MASTER_PORT"), std::string::npos);
  torchrun["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // the agent found a free port for rank 0
  EXPECT_EQ(detect_ok(torchrun).coordinator, "10.0.0.5:29500");
}

std::map<std::string, std::string> open_mpi(int rank, int local_size, std::string uri) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % local_size)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)},
          {"OMPI_MCA_orte_hnp_uri", std::move(uri)}};
}

// One host: 127.0.0.1 at a port from mpirun's identity, the same for every rank of the job
// and (almost always) another for another job; across hosts MASTER_ADDR/MASTER_PORT.
TEST(RankEnvironment, OpenMpiOnOneHostDerivesTheCoordinatorFromTheJob) {
  const std::string job = "1234567890.0;tcp://10.0.0.1:41234";
  auto first = detect_ok(open_mpi(0, 4, job)), last = detect_ok(open_mpi(3, 4, job));
  EXPECT_EQ(first.coordinator, last.coordinator);
  EXPECT_EQ(first.coordinator.rfind("127.0.0.1:", 0), 0u) << first.coordinator;
  const int port = std::stoi(first.coordinator.substr(10));
  EXPECT_GE(port, 20000);
  EXPECT_LT(port, 30000);
  EXPECT_NE(detect_ok(open_mpi(0, 4, "987.0;tcp://10.0.0.1:5555")).coordinator, first.coordinator);
  EXPECT_NE(first.coordinator_source.find("OMPI_MCA_orte_hnp_uri"), std::string::npos);
  EXPECT_EQ(detect_ok(open_mpi(0, 2, job)).coordinator, "") << "two hosts: the config's, or MASTER_ADDR";
  auto passed = open_mpi(0, 2, job);
  passed["MASTER_ADDR"] = "node1";
  passed["MASTER_PORT"] = "29400";
  EXPECT_EQ(detect_ok(passed).coordinator, "node1:29400");
}

std::map<std::string, std::string> slurm(std::string nodelist, std::string tasks_per_node, int node) {
  return {{"SLURM_PROCID", "4"},
          {"SLURM_NTASKS", "7"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_JOB_ID", "4242"},
          {"SLURM_JOB_NODELIST", std::move(nodelist)},
          {"SLURM_STEP_TASKS_PER_NODE", std::move(tasks_per_node)}};
}

// SLURM: the first host of the job's node list at a port from the job id (MASTER_PORT when
// set), and this node's share of the step's tasks.
TEST(RankEnvironment, SlurmGivesTheCoordinatorAndThisNodesTasks) {
  auto env = detect_ok(slurm("node[03-05,9],gpu1", "2(x3),1", 3));
  EXPECT_EQ(env.coordinator.substr(0, 7), "node03:");
  const int port = std::stoi(env.coordinator.substr(7));
  EXPECT_GE(port, 20000);
  EXPECT_LT(port, 30000);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(detect_ok(slurm("node[03-05,9],gpu1", "2(x3),1", 1)).local_world_size, 2);
  EXPECT_EQ(detect_ok(slurm("a01,b02", "4", 0)).coordinator.substr(0, 4), "a01:");
  EXPECT_EQ(detect_ok(slurm("localhost", "7", 0)).local_world_size, 7);
  auto given = slurm("gpu[7-8]", "4(x2)", 1);
  given["MASTER_PORT"] = "29600";
  EXPECT_EQ(detect_ok(given).coordinator, "gpu7:29600");
  given["TROUPE_COORDINATOR"] = "10.1.1.1:29700";
  env = detect_ok(given);
  EXPECT_EQ(env.coordinator, "10.1.1.1:29700") << "TROUPE_COORDINATOR wins";
  EXPECT_EQ(env.coordinator_source, "TROUPE_COORDINATOR");
  EXPECT_NE(detect_error(slurm("n1", "8", 0)).find("this node runs 8 tasks"), std::string::npos);
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
