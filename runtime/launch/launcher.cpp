#include "runtime/launch/launcher.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "runtime/launch/output_relay.hpp"
#include "runtime/launch/rank_process.hpp"
#include "runtime/launch/supervisor.hpp"

namespace troupe {
namespace {

constexpr int kWriteStallMs = 1000;  // a stalled stdout/stderr before output is dropped
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Signal handlers can only reach the loop through a global: the write end of a self-pipe.
std::atomic<int> g_signal_pipe{-1};
std::atomic<bool> g_launch_running{false};
std::atomic<bool> g_interrupted{false};  // a signal reached the launcher during the launch

extern "C" void on_launcher_signal(int signal_number) {
  int saved_errno = errno;
  g_interrupted.store(true);
  int fd = g_signal_pipe.load();
  unsigned char byte = static_cast<unsigned char>(signal_number);
  if (fd >= 0) (void)!::write(fd, &byte, 1);
  errno = saved_errno;
}

/// While alive: SIGINT/SIGTERM/SIGHUP are written to a pipe, SIGPIPE is ignored.
class SignalCapture {
 public:
  static Result<std::unique_ptr<SignalCapture>> make() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return make_error(
          fmt::format("troupe: cannot create the launcher's signal pipe: {}", std::strerror(errno)));
    }
    return std::unique_ptr<SignalCapture>(new SignalCapture(fds[0], fds[1]));
  }
  SignalCapture(const SignalCapture&) = delete;
  SignalCapture& operator=(const SignalCapture&) = delete;
  ~SignalCapture() {
    for (size_t i = 0; i < std::size(kForwardedSignals); ++i) {
      ::sigaction(kForwardedSignals[i], &previous_[i], nullptr);
    }
    ::sigaction(SIGPIPE, &previous_pipe_, nullptr);
    g_signal_pipe.store(-1);
    ::close(read_fd_);
    ::close(write_fd_);
  }
  int read_fd() const { return read_fd_; }

 private:
  SignalCapture(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {
    g_signal_pipe.store(write_fd_);
    struct sigaction action {};
    action.sa_handler = on_launcher_signal;
    ::sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (size_t i = 0; i < std::size(kForwardedSignals); ++i) {
      ::sigaction(kForwardedSignals[i], &action, &previous_[i]);
      // A signal ignored when we started (nohup, a shell's background job) stays ignored.
      if (previous_[i].sa_handler == SIG_IGN) {
        ::sigaction(kForwardedSignals[i], &previous_[i], nullptr);
      }
    }
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &previous_pipe_);
  }

  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction previous_[std::size(kForwardedSignals)]{};
  struct sigaction previous_pipe_ {};
};

/// Writes all bytes to fd, waiting a bounded time if it is non-blocking and full.
void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && errno == EAGAIN) {
      pollfd waiter{fd, POLLOUT, 0};
      if (::poll(&waiter, 1, kWriteStallMs) > 0) continue;
    }
    if (written <= 0) return;  // a closed or broken stdout: drop the output, keep supervising
    bytes.remove_prefix(static_cast<size_t>(written));
  }
}

/// Checks the options; an empty result means they are usable.
std::optional<std::string> validate(const LaunchOptions& options) {
  if (options.ranks < 1 || options.ranks > kLaunchRanksMax) {
    return fmt::format("troupe: cannot launch {} ranks; the number of ranks must be from 1 to {}",
                       options.ranks, kLaunchRanksMax);
  }
  if (options.argv.empty() || options.argv[0].empty()) {
    return std::string("troupe: no program to launch; give the program and its arguments");
  }
  if (!(options.stop_grace_s >= 0) || !std::isfinite(options.stop_grace_s)) {
    return fmt::format(
        "troupe: stop_grace_s is {}, but it must be a finite number of seconds, "
        "0 or more",
        options.stop_grace_s);
  }
  for (const auto& [key, value] : options.extra_env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return fmt::format(
          "troupe: '{}' is not an environment variable name (it must be non-empty "
          "and contain no '=')",
          key);
    }
  }
  return std::nullopt;
}

/// Starts the ranks and supervises them; the caller has validated the options.
int run_launch(const LaunchOptions& options) {
  auto signals = SignalCapture::make();
  if (!signals) {
    write_all(STDERR_FILENO, signals.error().message + "\n");
    return 1;
  }
  ProgressMode mode = ::isatty(STDOUT_FILENO) ? ProgressMode::in_place : ProgressMode::as_lines;
  OutputRelay relay(
      options.ranks, mode,
      [](OutputStream stream, std::string_view bytes) {
        write_all(stream == OutputStream::out ? STDOUT_FILENO : STDERR_FILENO, bytes);
      },
      options.prefix_stdout);
  Supervisor supervisor(options.stop_grace_s, relay, (*signals)->read_fd());
  std::vector<std::string> inherited = inherited_environment();
  for (int64_t rank = 0; rank < options.ranks; ++rank) {
    auto process = start_rank(options, rank, rank_environment(inherited, options, rank));
    if (!process) {
      supervisor.fail(process.error().message, 1);
      break;
    }
    supervisor.add(*process);
  }
  return supervisor.run();
}

}  // namespace

int launch_ranks(const LaunchOptions& options) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (auto problem = validate(options)) {
    write_all(STDERR_FILENO, *problem + "\n");
    return kLaunchUsageExitCode;
  }
  if (g_launch_running.exchange(true)) {
    write_all(STDERR_FILENO, "troupe: another launch is already running in this process\n");
    return kLaunchUsageExitCode;
  }
  g_interrupted.store(false);
  int exit_code = run_launch(options);
  g_launch_running.store(false);
  return exit_code;
}

bool launch_interrupted() {
  return g_interrupted.load();
}

}  // namespace troupe
