// IssueQueue: keeps the collectives a stage's compute thread issues in program order
// when some of them must first wait for I/O.
//
// The transport requires every rank to issue the same collectives in the same order.
// The compute thread issues them in a rank-consistent order (the layer sequence, the
// fixed gradient-row order), but with the parameter partition on NVMe a row's gather can
// only go out once this rank's block has been read, and reads complete in any order and
// at any time. So every collective of the compute thread takes a place in line here; it
// goes out when it is ready and everything before it has gone out.
//
// Thread safety: every member from any thread. Issues run under the queue's lock, on
// the thread that made them go (the compute thread, or the NVMe completion thread):
// keep them to a message send, and never call back into the queue from one.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace troupe {

class IssueQueue {
 public:
  using Issue = std::function<void()>;
  using Ticket = uint64_t;

  /// Takes the next place in line for `issue`, which goes out once ready(ticket).
  Ticket reserve(Issue issue);
  /// The issue of `ticket` may go: it goes, with every ready one behind it, once all
  /// before it have gone.
  void ready(Ticket ticket);
  /// reserve + ready: goes now unless something before it still waits.
  void issue(Issue issue) { ready(reserve(std::move(issue))); }
  /// Places taken whose issue has not gone out yet.
  std::size_t waiting() const;

 private:
  struct Place {
    Issue issue;
    bool ready = false;
  };
  mutable std::mutex mutex_;
  std::deque<Place> line_;
  Ticket front_ = 0;  // the ticket of line_.front()
};

}  // namespace troupe
