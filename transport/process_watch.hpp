// Watching the processes of the ranks that share this host, so that one that dies is
// named at once: a launcher such as DeepSpeed's kills every other rank within a second of
// one's death, sooner than heartbeats (peer_timeout_s) or a shared-memory transport (which
// reports nothing) would tell; and its own report names a process, not a rank.
//
// Each watched process is a pidfd (Linux 5.3+), readable once the process has exited, and
// is polled without blocking. Only ranks of this host and this pid namespace are watched,
// so a pid never means another machine's or container's process; where pidfds are not to
// be had, nothing is watched and heartbeats and UCX still find the loss.
//
// Launchers stop the surviving ranks with SIGTERM (torchrun within 0.1 s of a death,
// DeepSpeed's within 1 s), which may come before the loss has failed a collective and been
// said. So the watched ranks are also kept where a SIGTERM handler can read them without
// locks (install_termination_report), and a rank stopped that way says which died.
// Thread safety: a ProcessWatch on one thread (the transport's progress thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/wire.hpp"

namespace troupe {

/// This process, as the ranks of its host see it.
wire::ProcessId this_process();

/// From now on, SIGTERM (when not ignored) first writes to stderr a line for each rank of
/// this host whose process has exited, then ends the process by SIGTERM as before:
/// "troupe: rank 0: SIGTERM received after rank 1's process (pid P on this host) exited".
/// Async-signal-safe: poll() and write() on what ProcessWatch registered beforehand.
void install_termination_report();

class ProcessWatch {
 public:
  explicit ProcessWatch(int64_t self_rank) : self_rank_(self_rank) {}
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  ~ProcessWatch();

  /// Watches `rank`'s process when it shares this process's namespace; false when it
  /// cannot be (another namespace, an unknown pid, no pidfd, a process already gone).
  bool watch(int64_t rank, const wire::ProcessId& process);
  /// The watched ranks whose process has exited since the last call, each once:
  /// "rank R's process (pid P on this host) exited".
  std::vector<std::string> exited();
  bool empty() const { return watched_.empty(); }

 private:
  struct Watched {
    int64_t rank;
    int64_t pid;
    int fd;
    int slot;  // in the SIGTERM handler's table; -1 when it was full
  };
  int64_t self_rank_;
  std::vector<Watched> watched_;
  std::vector<int> exited_slots_;  // still said on SIGTERM until this watch ends
};

}  // namespace troupe
