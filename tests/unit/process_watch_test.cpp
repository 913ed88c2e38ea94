// Watching the processes of a host's ranks: an exit is seen once, by rank and pid; only
// processes of this pid namespace are watched; and a SIGTERM names the ranks that died.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "transport/process_watch.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

// A child that sleeps until killed.
pid_t sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

// What exited() says within `bound`.
std::vector<std::string> exits_within(ProcessWatch& watch, std::chrono::milliseconds bound) {
  auto end = std::chrono::steady_clock::now() + bound;
  for (;;) {
    auto exits = watch.exited();
    if (!exits.empty() || std::chrono::steady_clock::now() > end) return exits;
    std::this_thread::sleep_for(5ms);
  }
}

TEST(ProcessWatch, AnExitIsSaidOnceByRankAndPid) {
  pid_t child = sleeper();
  ASSERT_GT(child, 0);
  wire::ProcessId id = this_process();
  id.pid = child;
  ProcessWatch watch(0);
  ASSERT_TRUE(watch.watch(3, id));
  EXPECT_TRUE(watch.exited().empty()) << "alive";
  kill(child, SIGKILL);
  auto exits = exits_within(watch, 2000ms);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0], "rank 3's process (pid " + std::to_string(child) + " on this host) exited");
  EXPECT_TRUE(watch.exited().empty()) << "said once";
  EXPECT_TRUE(watch.empty());
  waitpid(child, nullptr, 0);
}

TEST(ProcessWatch, OnlyOtherProcessesOfThisPidNamespaceAreWatched) {
  ProcessWatch watch(0);
  wire::ProcessId self = this_process();
  ASSERT_NE(self.pid_namespace, 0u) << "/proc/self/ns/pid is readable here";
  EXPECT_FALSE(watch.watch(1, self)) << "this process itself";
  EXPECT_FALSE(watch.watch(1, wire::ProcessId{self.pid_namespace + 1, 1})) << "another namespace's pid 1";
  EXPECT_FALSE(watch.watch(1, wire::ProcessId{0, 1})) << "an unknown namespace";
  EXPECT_TRUE(watch.empty());
}

// A child watches a grandchild as rank 1, the grandchild is killed, then SIGTERM reaches
// the child: it writes the line naming rank 1 and still ends by SIGTERM.
TEST(ProcessWatch, ASigtermNamesTheRanksWhoseProcessExited) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t child = fork();
  if (child == 0) {
    dup2(out[1], STDERR_FILENO);
    pid_t grandchild = sleeper();
    wire::ProcessId id = this_process();
    id.pid = grandchild;
    ProcessWatch watch(0);
    if (!watch.watch(1, id)) _exit(3);
    install_termination_report();
    kill(grandchild, SIGKILL);
    waitpid(grandchild, nullptr, 0);
    raise(SIGTERM);
    _exit(4);  // not reached: SIGTERM still ends the process
  }
  close(out[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::string said;
  char buffer[512];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) said.append(buffer, n);
  close(out[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status) << ": " << said;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_NE(said.find("troupe: rank 0: SIGTERM received after rank 1's process (pid "), std::string::npos)
      << said;
}

}  // namespace
}  // namespace troupe
