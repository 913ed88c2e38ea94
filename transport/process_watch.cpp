#include "transport/process_watch.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace troupe {
namespace {

// What the SIGTERM handler may read: a slot per watched rank of every ProcessWatch alive.
// A slot's state is its pidfd while watched, kExited once the exit was seen, kInUse while
// the handler reads it (so no other thread closes its fd or rewrites its line), else free.
constexpr int kFree = -1, kFilling = -2, kExited = -3, kInUse = -4;
constexpr int kSlots = 512;
constexpr std::size_t kLineBytes = 200;
struct Slot {
  std::atomic<int> state{kFree};
  char line[kLineBytes] = {};
  std::size_t length = 0;
};
Slot g_slots[kSlots];

int claim_slot(const std::string& line) {
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    g_slots[i].length = std::min(line.size(), kLineBytes);
    std::memcpy(g_slots[i].line, line.data(), g_slots[i].length);
    return i;
  }
  return -1;
}

// Moves a slot to `next`; false when the SIGTERM handler holds it, and then its fd stays
// open (the process is about to end by the signal).
bool release(int slot, int next) {
  int current = g_slots[slot].state.load();
  while (current != kInUse)
    if (g_slots[slot].state.compare_exchange_weak(current, next)) return true;
  return false;
}

extern "C" void on_termination(int signal_number) {
  const int saved_errno = errno;
  for (Slot& slot : g_slots) {
    int state = slot.state.load();
    if ((state < 0 && state != kExited) || !slot.state.compare_exchange_strong(state, kInUse)) continue;
    bool exited = state == kExited;
    if (state >= 0) {
      pollfd p{state, POLLIN, 0};
      exited = poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
    }
    const bool written = !exited || write(STDERR_FILENO, slot.line, slot.length) >= 0;
    int held = kInUse;
    slot.state.compare_exchange_strong(held, state);
    if (!written) break;
  }
  errno = saved_errno;
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

}  // namespace

wire::ProcessId this_process() {
  // The link reads "pid:[4026531836]": the namespace's inode number.
  char link[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
  wire::ProcessId p;
  p.pid = getpid();
  if (n > 5) p.pid_namespace = std::strtoull(link + 5, nullptr, 10);
  return p;
}

void install_termination_report() {
  struct sigaction current {};
  if (sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) return;
  struct sigaction report {};
  report.sa_handler = on_termination;
  sigemptyset(&report.sa_mask);
  sigaction(SIGTERM, &report, nullptr);
}

ProcessWatch::~ProcessWatch() {
  for (const Watched& w : watched_)
    if (w.slot < 0 || release(w.slot, kFree)) close(w.fd);
  for (int slot : exited_slots_) release(slot, kFree);
}

bool ProcessWatch::watch(int64_t rank, const wire::ProcessId& process) {
  const wire::ProcessId self = this_process();
  if (self.pid_namespace == 0 || process.pid_namespace != self.pid_namespace || process.pid <= 0 ||
      process.pid == self.pid)
    return false;
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(process.pid), 0));
  if (fd < 0) return false;
  const int slot =
      claim_slot(fmt::format("troupe: rank {}: SIGTERM received after rank {}'s process (pid {} on "
                             "this host) exited\n",
                             self_rank_, rank, process.pid));
  if (slot >= 0) g_slots[slot].state.store(fd);
  watched_.push_back(Watched{rank, process.pid, fd, slot});
  return true;
#else
  return false;
#endif
}

std::vector<std::string> ProcessWatch::exited() {
  std::vector<std::string> out;
  if (watched_.empty()) return out;
  std::vector<pollfd> fds;
  for (const Watched& w : watched_) fds.push_back(pollfd{w.fd, POLLIN, 0});
  if (poll(fds.data(), fds.size(), 0) <= 0) return out;
  std::vector<Watched> still;
  for (std::size_t i = 0; i < watched_.size(); ++i) {
    const Watched& w = watched_[i];
    if (fds[i].revents == 0) {
      still.push_back(w);
      continue;
    }
    out.push_back(fmt::format("rank {}'s process (pid {} on this host) exited", w.rank, w.pid));
    if (w.slot >= 0) exited_slots_.push_back(w.slot);
    if (w.slot < 0 || release(w.slot, kExited)) close(w.fd);
  }
  watched_ = std::move(still);
  return out;
}

}  // namespace troupe
