// launch_ranks on real child processes (/bin/sh scripts). Needs fork/exec; no GPU.
#include "runtime/launch/launcher.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.hpp"

namespace troupe {
namespace {

struct LaunchRun {
  int exit_code = 0;
  std::string out;
  std::string err;
  double elapsed_s = 0;
};

LaunchOptions shell(int64_t ranks, std::string script, double stop_grace_s = 10) {
  LaunchOptions options;
  options.ranks = ranks;
  options.argv = {"/bin/sh", "-c", std::move(script)};
  options.stop_grace_s = stop_grace_s;
  return options;
}

LaunchRun run_captured(const LaunchOptions& options) {
  LaunchRun run;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  auto start = std::chrono::steady_clock::now();
  run.exit_code = launch_ranks(options);
  run.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.out = ::testing::internal::GetCapturedStdout();
  run.err = ::testing::internal::GetCapturedStderr();
  return run;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A fresh directory for handshakes between ranks through files; removed at the end.
class ReadyDir {
 public:
  ReadyDir() {
    const std::string dir = testing::make_temp_dir("troupe-launcher-test-");
    EXPECT_FALSE(dir.empty());
    path_ = !dir.empty() ? dir : "/nonexistent";
  }
  ~ReadyDir() {
    std::remove((path_ + "/ready").c_str());
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Rank 0 waits (at most 5 s) until rank 1 has created $READY_DIR/ready, then fails.
constexpr const char* kRank0FailsOnceRank1IsReady =
    "if [ \"$TROUPE_RANK\" = 0 ]; then i=0; "
    "while [ ! -e \"$READY_DIR/ready\" ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done; "
    "exit 4; fi; ";

/// True while `pid` runs (a zombie waiting for its new parent to reap it counts as gone).
bool is_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() && line[close_paren + 2] != 'Z';
}

TEST(LaunchRanks, AllRanksSucceedingReturnsZero) {
  auto run = run_captured(shell(3, "exit 0"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "");
}

TEST(LaunchRanks, OutputLinesArePrefixedWithTheirRank) {
  auto run = run_captured(shell(2, "echo \"hello from $TROUPE_RANK\"; echo \"oops $TROUPE_RANK\" >&2"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "[rank 0] hello from 0\n")) << run.out;
  EXPECT_TRUE(contains(run.out, "[rank 1] hello from 1\n")) << run.out;
  EXPECT_TRUE(contains(run.err, "[rank 0] oops 0\n")) << run.err;
  EXPECT_TRUE(contains(run.err, "[rank 1] oops 1\n")) << run.err;
  EXPECT_FALSE(contains(run.out, "oops")) << run.out;
}

TEST(LaunchRanks, FinalLineWithoutNewlineIsRelayed) {
  auto run = run_captured(shell(1, "printf 'first\\nno newline'"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "[rank 0] first\n[rank 0] no newline\n");
}

TEST(LaunchRanks, EachRankGetsItsTroupeVariablesAndExtraEnvironment) {
  auto options = shell(2,
                       "echo \"$TROUPE_RANK $TROUPE_WORLD_SIZE $TROUPE_LOCAL_RANK "
                       "$TROUPE_LOCAL_WORLD_SIZE $EXTRA\"");
  options.extra_env = {{"EXTRA", "value"}, {"TROUPE_RANK", "overridden"}};
  auto run = run_captured(options);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "[rank 0] 0 2 0 2 value\n")) << run.out;
  EXPECT_TRUE(contains(run.out, "[rank 1] 1 2 1 2 value\n")) << run.out;
}

TEST(LaunchRanks, FailingRankStopsTheOthersWithinTheGracePeriod) {
  auto run = run_captured(shell(3, "if [ \"$TROUPE_RANK\" = 1 ]; then sleep 0.2; exit 3; fi; sleep 60"));
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_LT(run.elapsed_s, 12);
  EXPECT_TRUE(contains(run.err, "troupe: rank 1 exited with status 3\n")) << run.err;
}

TEST(LaunchRanks, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  ReadyDir ready;
  auto options = shell(
      2, std::string(kRank0FailsOnceRank1IsReady) + "trap '' TERM; touch \"$READY_DIR/ready\"; sleep 60", 1);
  options.extra_env = {{"READY_DIR", ready.path()}};
  auto run = run_captured(options);
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_GE(run.elapsed_s, 0.9) << run.err;
  EXPECT_LT(run.elapsed_s, 5);
  EXPECT_TRUE(contains(run.err, "troupe: rank 1 did not stop within 1 s")) << run.err;
}

// A launcher started where SIGINT and SIGQUIT are ignored (a script's background job) keeps
// them so itself, but its ranks start with them at their defaults, so that a rank sent
// INT stops as any program does.
TEST(LaunchRanks, RanksStartWithInterruptAndQuitAtTheirDefaults) {
  struct sigaction ignore {
  }, old_int{}, old_quit{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ignore, &old_int);
  ::sigaction(SIGQUIT, &ignore, &old_quit);
  LaunchOptions options;
  options.argv = {"/bin/grep", "SigIgn", "/proc/self/status"};
  auto run = run_captured(options);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGQUIT, &old_quit, nullptr);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto at = run.out.find("SigIgn:");
  ASSERT_NE(at, std::string::npos) << run.out;
  const unsigned long long ignored = std::stoull(run.out.substr(at + 7), nullptr, 16);
  const unsigned long long interrupt_and_quit = (1ull << (SIGINT - 1)) | (1ull << (SIGQUIT - 1));
  EXPECT_EQ(ignored & interrupt_and_quit, 0u) << run.out;
}

TEST(LaunchRanks, ChildrenOfAStoppedRankAreStoppedToo) {
  ReadyDir ready;
  auto options = shell(2, std::string(kRank0FailsOnceRank1IsReady) +
                              "sleep 60 & echo \"child $!\"; touch \"$READY_DIR/ready\"; wait");
  options.extra_env = {{"READY_DIR", ready.path()}};
  auto run = run_captured(options);
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_LT(run.elapsed_s, 12);
  auto at = run.out.find("[rank 1] child ");
  ASSERT_NE(at, std::string::npos) << run.out;
  pid_t child = static_cast<pid_t>(std::stol(run.out.substr(at + 15)));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (is_running(child) && std::chrono::steady_clock::now() < deadline) {
    ::usleep(10000);
  }
  EXPECT_FALSE(is_running(child));
}

TEST(LaunchRanks, BackgroundChildHoldingTheOutputDoesNotHangTheLauncher) {
  auto run = run_captured(shell(1, "sleep 3 & echo started"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_LT(run.elapsed_s, 2.5);
  EXPECT_EQ(run.out, "[rank 0] started\n");
}

TEST(LaunchRanks, RankKilledBySignalIsNamed) {
  auto run = run_captured(shell(2, "if [ \"$TROUPE_RANK\" = 1 ]; then kill -KILL $$; fi; sleep 60"));
  EXPECT_EQ(run.exit_code, 128 + 9);
  EXPECT_LT(run.elapsed_s, 12);
  EXPECT_TRUE(contains(run.err, "troupe: rank 1 was killed by signal 9 (Killed)\n")) << run.err;
}

TEST(LaunchRanks, SigtermToTheLauncherStopsAllRanks) {
  // Rank 0's parent is the launcher (this test process).
  auto run = run_captured(shell(2, "if [ \"$TROUPE_RANK\" = 0 ]; then kill -TERM $PPID; fi; sleep 60"));
  EXPECT_EQ(run.exit_code, 128 + 15);
  EXPECT_LT(run.elapsed_s, 12);
  EXPECT_TRUE(contains(run.err, "troupe: received signal 15 (Terminated); stopping all ranks")) << run.err;
}

TEST(LaunchRanks, ProgressLinesArePlainPrefixedLinesWhenNotATerminal) {
  auto run = run_captured(shell(1, "printf '\\036step 1/2\\n\\036step 2/2\\ndone\\n'"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "[rank 0] step 1/2\n[rank 0] step 2/2\n[rank 0] done\n");
}

TEST(LaunchRanks, MissingProgramFailsWithAClearMessage) {
  LaunchOptions options;
  options.ranks = 1;
  options.argv = {"troupe-no-such-program"};
  auto run = run_captured(options);
  EXPECT_EQ(run.exit_code, kCannotStartExitCode);
  EXPECT_TRUE(contains(run.err, "troupe: cannot start troupe-no-such-program: No such file or directory"))
      << run.err;
  EXPECT_TRUE(contains(run.err, "troupe: rank 0 exited with status 127")) << run.err;
}

TEST(LaunchRanks, InvalidOptionsAreRejected) {
  EXPECT_EQ(run_captured(shell(0, "exit 0")).exit_code, kLaunchUsageExitCode);
  LaunchOptions no_program;
  EXPECT_EQ(run_captured(no_program).exit_code, kLaunchUsageExitCode);
  auto bad_env = shell(1, "exit 0");
  bad_env.extra_env = {{"A=B", "c"}};
  auto run = run_captured(bad_env);
  EXPECT_EQ(run.exit_code, kLaunchUsageExitCode);
  EXPECT_TRUE(contains(run.err, "'A=B' is not an environment variable name")) << run.err;
}

}  // namespace
}  // namespace troupe
