// Supervisor: the launcher's loop over started ranks.
//
// It polls every rank's output pipes (and the launcher's signal pipe) with a short tick,
// relays what it reads through an OutputRelay, reaps ranks with waitpid(WNOHANG) on their
// own pids (never wait(-1), so other children of the process are left alone) and, on the
// first failure, stops everyone: SIGTERM to every rank's process group, SIGKILL to those
// still running after the grace period, then a bounded wait for the kernel to reap them.
// Exits that the stop itself causes are not reported as failures.
//
// Thread safety: none; the thread inside launch_ranks owns the supervisor, the relay and
// the pipes. The signal pipe is written by a signal handler and only read here.
// Invariants: run() returns after every rank is reaped (or after a bounded wait following
// SIGKILL) and every pipe is closed; no wait inside is unbounded.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/launch/output_relay.hpp"
#include "runtime/launch/rank_process.hpp"

namespace troupe {

class Supervisor {
 public:
  /// `signal_fd` is a non-blocking pipe carrying one byte per signal the launcher received.
  Supervisor(double stop_grace_s, OutputRelay& relay, int signal_fd);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Takes ownership of a started rank's pipes.
  void add(RankProcess rank);

  /// Reports a failure of the launcher itself (one line on stderr) and stops the ranks.
  void fail(const std::string& message, int exit_code);

  /// Runs until every rank is reaped and its output relayed. Returns 0, or the exit code
  /// of the first failure: a rank's status, 128 + its signal, or 128 + a launcher signal.
  int run();

 private:
  using Clock = std::chrono::steady_clock;
  enum class ReadAmount { once, until_empty };

  bool step();
  void poll_and_read();
  void read_pipe(RankProcess& rank, OutputStream stream, ReadAmount amount);
  void reap_exited();
  void on_exit(size_t index, int wait_status);
  void handle_signals();
  void begin_stop(int exit_code);
  void report_unstopped() const;
  void escalate();
  void signal_all(int signal_number);
  void finish_output(RankProcess& rank);
  bool all_exited() const;
  bool any_pipe_open() const;

  double stop_grace_s_;
  OutputRelay& relay_;
  int signal_fd_;
  std::vector<RankProcess> ranks_;
  std::vector<bool> exited_;  // parallel to ranks_
  int exit_code_ = 0;
  bool stopping_ = false;                         // SIGTERM sent
  bool killed_ = false;                           // SIGKILL sent
  Clock::time_point kill_at_;                     // end of the grace period
  Clock::time_point give_up_at_;                  // end of the wait after SIGKILL
  std::optional<Clock::time_point> drain_until_;  // set once every rank has exited
};

}  // namespace troupe
