// A rank killed in the middle of training stops the whole job within 10 s, and the
// message names the rank and how it ended.
#include <gtest/gtest.h>
#include <signal.h>

#include <dirent.h>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

// The pid of the process whose command line holds `marker` and whose environment has `env`.
int find_process(const std::string& marker, const std::string& env) {
  DIR* proc = opendir("/proc");
  int found = -1;
  while (dirent* e = readdir(proc)) {
    int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::string cmdline = testing::read_file("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find(marker) == std::string::npos || cmdline.find("rank") == std::string::npos) continue;
    std::string environ = testing::read_file("/proc/" + std::to_string(pid) + "/environ");
    if (environ.find(env + '\0') == std::string::npos && environ.find('\0' + env) == std::string::npos)
      continue;
    found = pid;
  }
  closedir(proc);
  return found;
}

struct Killed {
  testing::CommandResult result;
  double stop_s = 0;
};

// Trains the tiny GPT with `settings` until steps are under way, then kills `rank`.
Killed kill_mid_run(const std::string& settings, int rank) {
  std::string dir = testing::make_temp_dir();
  std::string metrics = dir + "/metrics.jsonl";
  std::string command = std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
                        " --set train.steps=100000 --set cluster.coordinator=" + testing::free_coordinator() +
                        settings + " --metrics " + metrics;
  Killed killed;
  Clock::time_point killed_at;
  std::thread job([&] { killed.result = testing::run_command(command, 120); });
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (testing::read_file(metrics).size() < 200 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int pid = find_process(metrics, "TROUPE_RANK=" + std::to_string(rank));
  EXPECT_GT(pid, 0) << "rank " << rank << " not found";
  killed_at = Clock::now();
  if (pid > 0) kill(pid, SIGKILL);
  job.join();
  killed.stop_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  return killed;
}

TEST(Failure, KilledRankStopsTheJobWithinTenSecondsAndIsNamed) {
  Killed k = kill_mid_run("", 1);
  EXPECT_NE(k.result.exit_code, 0) << k.result.output;
  EXPECT_LT(k.stop_s, 10.0) << k.result.output;
  EXPECT_NE(k.result.output.find("rank 1 was killed by signal 9"), std::string::npos) << k.result.output;
}

// A middle stage of a 4-stage pipeline: its neighbours wait on transfers from it, the
// others on nothing it sends directly; every rank still stops, and the message names it.
TEST(Failure, KilledPipelineStageStopsEveryRankWithinTenSecondsAndIsNamed) {
  Killed k = kill_mid_run(
      " --set cluster.world_size=4 --set parallel.dp=1 --set parallel.pp=4 --set batch.micro_batch_size=2"
      " --set batch.gradient_accumulation_steps=4",
      2);
  EXPECT_NE(k.result.exit_code, 0) << k.result.output;
  EXPECT_LT(k.stop_s, 10.0) << k.result.output;
  EXPECT_NE(k.result.output.find("rank 2 was killed by signal 9"), std::string::npos) << k.result.output;
}

TEST(Failure, RankOutsideALauncherLosesItsPeerAndNamesIt) {
  // Without `troupe run` to stop it, rank 0 must notice on its own that rank 1 died.
  std::string dir = testing::make_temp_dir();
  std::string metrics = dir + "/metrics.jsonl";
  std::string base = std::string(TROUPE_BINARY) + " rank " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
                     " --set train.steps=100000 --set cluster.coordinator=" + testing::free_coordinator() +
                     " --set cluster.collective_timeout_s=5 --metrics " + metrics;
  testing::CommandResult rank0;
  std::thread coordinator(
      [&] { rank0 = testing::run_command("TROUPE_RANK=0 TROUPE_WORLD_SIZE=2 " + base, 120); });
  std::thread other([&] {
    testing::run_command("TROUPE_RANK=1 TROUPE_WORLD_SIZE=2 " + base + " --set train.log_interval=7", 120);
  });
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (testing::read_file(metrics).size() < 200 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int pid = find_process("train.log_interval=7", "TROUPE_RANK=1");
  ASSERT_GT(pid, 0) << "rank 1 not found";
  auto killed_at = Clock::now();
  kill(pid, SIGKILL);
  other.join();
  coordinator.join();
  double stop_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_NE(rank0.exit_code, 0) << rank0.output;
  EXPECT_LT(rank0.exit_code, 128) << "crashed: " << rank0.output;
  EXPECT_LT(stop_s, 10.0) << rank0.output;
  EXPECT_NE(rank0.output.find("rank 1"), std::string::npos) << rank0.output;
}

// A rank that stops answering without dying (SIGSTOP here; a hang alike) is found by the
// silence of its heartbeats within peer_timeout_s, not by the 120 s collective timeout,
// and named by the rank that watched it, whichever of the two was stopped.
class Stopped : public ::testing::TestWithParam<int> {};

TEST_P(Stopped, RankIsFoundByItsSilenceWithinThePeerTimeoutAndNamed) {
  const int stopped_rank = GetParam();
  std::string dir = testing::make_temp_dir();
  std::string metrics = dir + "/metrics.jsonl";
  std::string command =
      std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
      " --set train.steps=100000 --set cluster.peer_timeout_s=3" +
      " --set cluster.collective_timeout_s=120 --set cluster.coordinator=" + testing::free_coordinator() +
      " --metrics " + metrics;
  testing::CommandResult result;
  std::thread job([&] { result = testing::run_command(command, 120); });
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (testing::read_file(metrics).size() < 200 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int pid = find_process(metrics, "TROUPE_RANK=" + std::to_string(stopped_rank));
  ASSERT_GT(pid, 0) << "rank " << stopped_rank << " not found";
  auto stopped_at = Clock::now();
  kill(pid, SIGSTOP);
  job.join();
  double stop_s = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(stop_s, 3.0 + 10.0) << result.output;
  EXPECT_NE(result.output.find("rank " + std::to_string(stopped_rank) + " has not been heard from for"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(testing::run_command("kill -0 " + std::to_string(pid) + " 2>/dev/null").exit_code, 1)
      << "the stopped rank was left behind";
}

INSTANTIATE_TEST_SUITE_P(Heartbeat, Stopped, ::testing::Values(0, 1),
                         [](const auto& info) { return "Rank" + std::to_string(info.param); });

}  // namespace
}  // namespace troupe
