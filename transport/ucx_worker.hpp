// UcxWorker: one UCX context and one worker, progressed by a single owner thread,
// with an event fd so the owner can sleep until there is work (drain, arm, epoll).
//
// Thread safety: every member except signal() belongs to the owner thread;
// signal() wakes a sleeping owner and is safe from any thread.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

/// Wraps a UCX status as an Error: "<what>: <UCX's words>".
Error ucx_error(const std::string& what, ucs_status_t status);

class UcxWorker {
 public:
  /// Creates the context and worker. Sets UCX's defaults troupe relies on (shared
  /// memory with peer error handling, listener port reuse) unless the user set them.
  static Result<std::unique_ptr<UcxWorker>> make(double peer_timeout_s);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  /// This worker's address, for peers to connect to.
  const std::vector<uint8_t>& address() const { return address_; }

  /// Progresses until UCX reports nothing more to do.
  void progress();
  /// Polls for up to `microseconds`; returns whether UCX made progress meanwhile, or
  /// `wake` (when given) became true: the owner has other work waiting.
  bool poll_for(int microseconds, const std::atomic<bool>* wake = nullptr);
  /// Sleeps until UCX has events, signal() is called, or timeout_ms passes.
  void wait(int timeout_ms);
  /// Wakes the owner from wait(); safe from any thread.
  void signal();

 private:
  UcxWorker() = default;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  int epoll_fd_ = -1;
  std::vector<uint8_t> address_;
};

/// Waits (progressing `worker`) for a UCX request to finish, up to timeout_s.
/// Returns the request's status; a request still pending at the deadline is cancelled.
ucs_status_t wait_request(UcxWorker& worker, ucs_status_ptr_t request, double timeout_s);

/// Closes an endpoint with UCP_EP_CLOSE_FLAG_FORCE, bounded in time.
void close_endpoint(UcxWorker& worker, ucp_ep_h ep);

}  // namespace troupe
