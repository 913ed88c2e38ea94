#include "runtime/launch/supervisor.hpp"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace troupe {
namespace {

constexpr int kPollTickMs = 50;                // longest sleep between checks on the ranks
constexpr size_t kReadChunkBytes = 64 * 1024;  // one read from one pipe
constexpr int kDrainReadsMax = 16;             // reads when emptying a pipe; writers may live on
constexpr double kKillWaitS = 5;               // after SIGKILL, how long to wait for reaping
constexpr double kDrainAfterExitS = 1;         // output still flowing from a rank's children
static_assert(kDrainReadsMax * kReadChunkBytes >= 64 * 1024,
              "emptying a pipe must cover Linux's default pipe capacity");

std::string describe_signal(int signal_number) {
  const char* name = ::strsignal(signal_number);
  return fmt::format("signal {} ({})", signal_number, name != nullptr ? name : "unknown");
}

std::chrono::steady_clock::time_point after(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(seconds));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Supervisor::Supervisor(double stop_grace_s, OutputRelay& relay, int signal_fd)
    : stop_grace_s_(stop_grace_s), relay_(relay), signal_fd_(signal_fd) {}

Supervisor::~Supervisor() {
  for (RankProcess& rank : ranks_) {
    close_fd(rank.stdout_fd);
    close_fd(rank.stderr_fd);
  }
}

void Supervisor::add(RankProcess rank) {
  ranks_.push_back(rank);
  exited_.push_back(false);
}

void Supervisor::fail(const std::string& message, int exit_code) {
  relay_.note(message);
  begin_stop(exit_code);
}

int Supervisor::run() {
  while (step()) {
  }
  if (stopping_) signal_all(SIGKILL);  // stragglers in the groups of ranks that exited
  for (RankProcess& rank : ranks_) finish_output(rank);
  relay_.close();
  return exit_code_;
}

/// One round of the loop; false when the launch is over.
bool Supervisor::step() {
  poll_and_read();
  handle_signals();
  reap_exited();
  Clock::time_point now = Clock::now();
  if (stopping_ && !killed_ && now >= kill_at_) {
    report_unstopped();
    escalate();
  }
  if (all_exited()) {
    if (!drain_until_) drain_until_ = after(kDrainAfterExitS);
    // Pipes still open after the ranks exited are held by their children; stop waiting.
    return any_pipe_open() && now < *drain_until_;
  }
  if (killed_ && now >= give_up_at_) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (exited_[i]) continue;
      relay_.note(fmt::format("troupe: rank {} (pid {}) did not exit after SIGKILL; leaving it",
                              ranks_[i].rank, ranks_[i].pid));
    }
    return false;
  }
  return true;
}

void Supervisor::poll_and_read() {
  std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
  std::vector<std::pair<size_t, OutputStream>> owners{{0, OutputStream::out}};  // unused slot
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].stdout_fd >= 0) {
      fds.push_back({ranks_[i].stdout_fd, POLLIN, 0});
      owners.emplace_back(i, OutputStream::out);
    }
    if (ranks_[i].stderr_fd >= 0) {
      fds.push_back({ranks_[i].stderr_fd, POLLIN, 0});
      owners.emplace_back(i, OutputStream::err);
    }
  }
  if (::poll(fds.data(), fds.size(), kPollTickMs) <= 0) return;  // timeout or EINTR
  for (size_t k = 1; k < fds.size(); ++k) {
    if (fds[k].revents == 0) continue;
    read_pipe(ranks_[owners[k].first], owners[k].second, ReadAmount::once);
  }
}

/// Reads and relays; closes the pipe at end of stream (or on an unrecoverable error).
void Supervisor::read_pipe(RankProcess& rank, OutputStream stream, ReadAmount amount) {
  int& fd = stream == OutputStream::out ? rank.stdout_fd : rank.stderr_fd;
  char buffer[kReadChunkBytes];
  for (int reads = 0; fd >= 0 && reads < kDrainReadsMax; ++reads) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return;
    if (got > 0) {
      relay_.append(rank.rank, stream, std::string_view(buffer, static_cast<size_t>(got)));
      if (amount == ReadAmount::once) return;
      continue;
    }
    relay_.finish(rank.rank, stream);
    close_fd(fd);
  }
}

void Supervisor::reap_exited() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (exited_[i]) continue;
    int wait_status = 0;
    pid_t result = ::waitpid(ranks_[i].pid, &wait_status, WNOHANG);
    if (result == ranks_[i].pid) {
      on_exit(i, wait_status);
    } else if (result < 0 && errno == ECHILD) {
      // Reaped elsewhere (SIGCHLD ignored, or a handler calling wait): the status is lost.
      exited_[i] = true;
      if (stopping_) continue;
      fail(fmt::format("troupe: lost the exit status of rank {} (pid {}): it was reaped "
                       "outside the launcher",
                       ranks_[i].rank, ranks_[i].pid),
           1);
    }
  }
}

void Supervisor::on_exit(size_t index, int wait_status) {
  exited_[index] = true;
  RankProcess& rank = ranks_[index];
  // Everything the rank wrote before exiting is in its pipes: relay it before naming it.
  read_pipe(rank, OutputStream::out, ReadAmount::until_empty);
  read_pipe(rank, OutputStream::err, ReadAmount::until_empty);
  if (stopping_) return;  // exits caused by the stop are not news
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) != 0) {
    relay_.note(fmt::format("troupe: rank {} exited with status {}", rank.rank, WEXITSTATUS(wait_status)));
    begin_stop(WEXITSTATUS(wait_status));
  } else if (WIFSIGNALED(wait_status)) {
    int signal_number = WTERMSIG(wait_status);
    relay_.note(fmt::format("troupe: rank {} was killed by {}", rank.rank, describe_signal(signal_number)));
    begin_stop(128 + signal_number);
  }
}

void Supervisor::handle_signals() {
  unsigned char signals[16];
  ssize_t got = ::read(signal_fd_, signals, sizeof signals);
  for (ssize_t i = 0; i < got; ++i) {
    int signal_number = signals[i];
    if (!stopping_) {
      fail(fmt::format("troupe: received {}; stopping all ranks", describe_signal(signal_number)),
           128 + signal_number);
    } else if (!killed_) {
      relay_.note(
          fmt::format("troupe: received {} again; killing all ranks now", describe_signal(signal_number)));
      escalate();
    }
  }
}

void Supervisor::begin_stop(int exit_code) {
  if (stopping_) return;
  stopping_ = true;
  exit_code_ = exit_code;
  kill_at_ = after(stop_grace_s_);
  signal_all(SIGTERM);
  signal_all(SIGCONT);  // a stopped rank (SIGSTOP) takes its SIGTERM only once it runs again
}

void Supervisor::report_unstopped() const {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (exited_[i]) continue;
    relay_.note(fmt::format("troupe: rank {} did not stop within {} s of SIGTERM; sending SIGKILL",
                            ranks_[i].rank, stop_grace_s_));
  }
}

void Supervisor::escalate() {
  killed_ = true;
  give_up_at_ = after(kKillWaitS);
  signal_all(SIGKILL);
}

/// Signals every rank's process group, so the ranks' own children get it too. Groups of
/// ranks already reaped are signalled as well: their children may still hold the pipes. A
/// group id cannot be reused while any member of the group is alive.
void Supervisor::signal_all(int signal_number) {
  for (const RankProcess& rank : ranks_) ::kill(-rank.pid, signal_number);
}

/// Relays what is left in a rank's pipes (held open by its children, if any) and closes them.
void Supervisor::finish_output(RankProcess& rank) {
  for (OutputStream stream : {OutputStream::out, OutputStream::err}) {
    read_pipe(rank, stream, ReadAmount::until_empty);
    relay_.finish(rank.rank, stream);
  }
  close_fd(rank.stdout_fd);
  close_fd(rank.stderr_fd);
}

bool Supervisor::all_exited() const {
  return std::all_of(exited_.begin(), exited_.end(), [](bool exited) { return exited; });
}

bool Supervisor::any_pipe_open() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const RankProcess& rank) { return rank.stdout_fd >= 0 || rank.stderr_fd >= 0; });
}

}  // namespace troupe
