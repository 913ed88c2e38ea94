// launch_ranks: runs one program as N ranks on this machine and supervises them.
//
// Each rank is a child process in its own process group (so a rank's own children can be
// stopped with it), with stdin from /dev/null, the launcher's environment plus
// LaunchOptions::extra_env plus TROUPE_RANK, TROUPE_WORLD_SIZE, TROUPE_LOCAL_RANK and
// TROUPE_LOCAL_WORLD_SIZE (local = global: every rank is on this host), which
// detect_rank_environment() reads back. Its stdout and stderr come back through pipes and
// are written to the launcher's stdout and stderr one whole line at a time, prefixed with
// `[rank N] ` (see output_relay.hpp, which also covers live progress lines).
//
// Failure: the first rank that exits non-zero or is killed by a signal is named in one line
// on stderr; every rank's process group then gets SIGTERM, and whatever is left after
// stop_grace_s gets SIGKILL. SIGINT, SIGTERM or SIGHUP sent to the launcher start the same
// stop (a second one skips the grace period). Output is relayed until the end.
//
// Thread safety: launch_ranks blocks the calling thread until every rank is reaped. It
// installs handlers for SIGINT, SIGTERM and SIGHUP and ignores SIGPIPE while it runs,
// restoring the previous dispositions on return, so only one launch may run per process at
// a time (a second concurrent call fails at once). Every wait inside is bounded.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace troupe {

/// The most ranks one launcher starts (each costs two pipes).
inline constexpr int64_t kLaunchRanksMax = 1024;

/// Exit code of a rank whose program could not be started (as in the shell).
inline constexpr int kCannotStartExitCode = 127;

/// Exit code of launch_ranks for invalid options; a failed start of a rank returns 1.
inline constexpr int kLaunchUsageExitCode = 2;

struct LaunchOptions {
  int64_t ranks = 1;
  std::vector<std::string> argv;  ///< program and arguments; argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> extra_env;  ///< added to every rank
  double stop_grace_s = 10;  ///< time between SIGTERM and SIGKILL when stopping the ranks
  bool prefix_stdout = true; ///< false: standard output lines pass without the `[rank N] ` prefix
};

/// Starts `ranks` copies of `argv` and waits for all of them. Returns 0 when every rank
/// exited 0; otherwise the first failing rank's exit status, or 128 + its signal, or
/// 128 + the signal that stopped the launcher, or kLaunchUsageExitCode for bad options.
int launch_ranks(const LaunchOptions& options);

/// Whether the last launch_ranks was stopped by a signal to the launcher (SIGINT, SIGTERM,
/// SIGHUP), not by a rank's failure: a restart must not undo what the user asked for.
bool launch_interrupted();

}  // namespace troupe
