// RankProcess: starting one rank of a local launch as a child process.
//
// start_rank forks a child that becomes the leader of a new process group, takes stdin from
// /dev/null, writes stdout and stderr into two pipes and execs the program (looked up in
// PATH) with the rank's environment. If exec fails, the child writes
// `troupe: cannot start PROGRAM: REASON` to its stderr pipe and exits with
// kCannotStartExitCode. The child also asks the kernel for SIGTERM if the launcher thread
// dies first, so ranks are not left running without a supervisor.
//
// Thread safety: start_rank may be called from any thread; between fork and exec the child
// makes only async-signal-safe calls, and everything it needs is prepared before fork.
// The returned RankProcess is owned by the launcher loop, which closes its descriptors.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "runtime/launch/launcher.hpp"

namespace troupe {

/// One started rank: its process, which also names its process group, and the
/// non-blocking read ends of its output pipes (-1 once closed).
struct RankProcess {
  int64_t rank = 0;
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

/// The rank's environment as "KEY=VALUE" entries: `inherited` (entries of the same form),
/// then options.extra_env, then the TROUPE_* rank variables, later entries replacing
/// earlier ones with the same key.
std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const LaunchOptions& options, int64_t rank);

/// This process's environment as "KEY=VALUE" entries, passed on unread to the ranks.
std::vector<std::string> inherited_environment();

/// Starts one rank with the given environment. Fails if a pipe or the fork fails; a
/// program that cannot be executed is reported by the child itself (see above).
Result<RankProcess> start_rank(const LaunchOptions& options, int64_t rank,
                               const std::vector<std::string>& environment);

}  // namespace troupe
