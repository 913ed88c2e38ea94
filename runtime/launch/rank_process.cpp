#include "runtime/launch/rank_process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include <fmt/format.h>

extern char** environ;

namespace troupe {
namespace {

/// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

Result<Pipe> make_pipe(int64_t rank) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return make_error(
        fmt::format("troupe: cannot create an output pipe for rank {}: {}", rank, std::strerror(errno)));
  }
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void set_entry(std::vector<std::string>& environment, const std::string& key, const std::string& value) {
  std::string prefix = key + "=";
  for (std::string& entry : environment) {
    if (entry.compare(0, prefix.size(), prefix) == 0) {
      entry = prefix + value;
      return;
    }
  }
  environment.push_back(prefix + value);
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

void write_all_raw(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    data += written;
    size -= static_cast<size_t>(written);
  }
}

/// Everything the child needs, prepared before fork.
struct ChildPlan {
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string cannot_start_prefix;  // "troupe: cannot start PROGRAM: "
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  pid_t parent;
};

/// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const ChildPlan& plan) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != plan.parent) ::_exit(kCannotStartExitCode);  // launcher already gone
  ::setpgid(0, 0);
  // The launcher ignores SIGPIPE and may block signals; the program starts with defaults.
  // A launcher started where SIGINT and SIGQUIT are ignored (a script's background job)
  // keeps them so for itself, but its ranks, in process groups of their own that only the
  // launcher and the user signal, stop on them as programs do.
  for (int s : {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP}) ::signal(s, SIG_DFL);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Move the sources above 2 first, so none is overwritten by an earlier dup2.
  const int sources[3] = {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd};
  int moved[3];
  for (int i = 0; i < 3; ++i) {
    moved[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, 3);
    if (moved[i] < 0) ::_exit(kCannotStartExitCode);
  }
  for (int i = 0; i < 3; ++i) {
    if (::dup2(moved[i], i) < 0) ::_exit(kCannotStartExitCode);
  }
  ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
  int error = errno;
  const char* reason = ::strerrordesc_np(error);
  if (reason == nullptr) reason = "unknown error";
  write_all_raw(2, plan.cannot_start_prefix.data(), plan.cannot_start_prefix.size());
  write_all_raw(2, reason, std::strlen(reason));
  write_all_raw(2, "\n", 1);
  ::_exit(kCannotStartExitCode);
}

}  // namespace

std::vector<std::string> inherited_environment() {
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    entries.emplace_back(*entry);
  }
  return entries;
}

std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const LaunchOptions& options, int64_t rank) {
  std::vector<std::string> environment = inherited;
  for (const auto& [key, value] : options.extra_env) set_entry(environment, key, value);
  set_entry(environment, "TROUPE_RANK", std::to_string(rank));
  set_entry(environment, "TROUPE_WORLD_SIZE", std::to_string(options.ranks));
  set_entry(environment, "TROUPE_LOCAL_RANK", std::to_string(rank));
  set_entry(environment, "TROUPE_LOCAL_WORLD_SIZE", std::to_string(options.ranks));
  return environment;
}

Result<RankProcess> start_rank(const LaunchOptions& options, int64_t rank,
                               const std::vector<std::string>& environment) {
  TROUPE_CHECK(!options.argv.empty(), "start_rank needs a program");
  auto out = make_pipe(rank);
  if (!out) return out.error();
  auto err = make_pipe(rank);
  if (!err) return err.error();
  UniqueFd null_input(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_input.get() < 0) {
    return make_error(
        fmt::format("troupe: cannot open /dev/null for rank {}: {}", rank, std::strerror(errno)));
  }

  std::vector<std::string> argv = options.argv;
  std::vector<std::string> envp = environment;
  ChildPlan plan{
      c_strings(argv),  c_strings(envp),      fmt::format("troupe: cannot start {}: ", options.argv[0]),
      null_input.get(), out->write_end.get(), err->write_end.get(),
      ::getpid()};

  pid_t pid = ::fork();
  if (pid < 0) {
    return make_error(
        fmt::format("troupe: cannot start rank {}: fork failed: {}", rank, std::strerror(errno)));
  }
  if (pid == 0) exec_child(plan);
  // Also set the group here, so signals reach the group even before the child runs.
  ::setpgid(pid, pid);
  for (int fd : {out->read_end.get(), err->read_end.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return RankProcess{rank, pid, out->read_end.release(), err->read_end.release()};
}

}  // namespace troupe
