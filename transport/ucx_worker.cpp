#include "transport/ucx_worker.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

namespace troupe {

Error ucx_error(const std::string& what, ucs_status_t status) {
  return make_error(fmt::format("{}: {}", what, ucs_status_string(status)));
}

namespace {

// UCX reads its settings from UCX_* variables; these are troupe's defaults for them.
// With peer error handling UCX turns shared memory off unless told it may keep it,
// and a listener cannot rebind a port in TIME_WAIT without address reuse.
void set_ucx_defaults(double peer_timeout_s) {
  setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
  setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
  setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
  // Sent eagerly through shared memory, a message lands in the receiver's queue without
  // waiting for the receiver to be scheduled; rendezvous (a pull by the receiver, then an
  // acknowledgement) waits on context switches of both ranks' progress threads, which
  // take milliseconds once compute holds every core: a pipeline's 1 MiB activations took
  // 0.3-17 ms (median 5) from one stage to the next on 2 vCPUs, 0.5 ms eagerly. So
  // messages up to 8 MiB (collectives' chunks, activations between stages) go eagerly,
  // and the shared-memory queues hold 8 MiB, so that a whole message fits without the
  // receiver draining it first. Larger ones go zero-copy.
  setenv("UCX_RNDV_THRESH", "8388608", 0);
  setenv("UCX_POSIX_FIFO_SIZE", "1024", 0);  // elements of UCX_POSIX_SEG_SIZE (8 KiB)
  setenv("UCX_SYSV_FIFO_SIZE", "1024", 0);
  auto keepalive = fmt::format("{}s", std::max(1.0, peer_timeout_s / 3));
  setenv("UCX_KEEPALIVE_INTERVAL", keepalive.c_str(), 0);
}

Result<ucp_context_h> make_context() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return ucx_error("reading UCX configuration", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "troupe";
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return ucx_error("initializing UCX", s);
  return context;
}

}  // namespace

Result<std::unique_ptr<UcxWorker>> UcxWorker::make(double peer_timeout_s) {
  set_ucx_defaults(peer_timeout_s);
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  auto context = make_context();
  if (!context) return context.error();
  w->context_ = *context;

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t s = ucp_worker_create(w->context_, &wp, &w->worker_);
  if (s != UCS_OK) return ucx_error("creating the UCX worker", s);

  s = ucp_worker_get_efd(w->worker_, &w->event_fd_);
  if (s != UCS_OK) return ucx_error("getting the UCX worker's event fd", s);
  w->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (w->epoll_fd_ < 0) return make_error("epoll_create1 failed");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = w->event_fd_;
  if (epoll_ctl(w->epoll_fd_, EPOLL_CTL_ADD, w->event_fd_, &ev) != 0)
    return make_error("epoll_ctl on the UCX event fd failed");

  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  s = ucp_worker_get_address(w->worker_, &address, &length);
  if (s != UCS_OK) return ucx_error("getting the UCX worker address", s);
  auto* bytes = reinterpret_cast<const uint8_t*>(address);
  w->address_.assign(bytes, bytes + length);
  ucp_worker_release_address(w->worker_, address);
  return w;
}

UcxWorker::~UcxWorker() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

void UcxWorker::progress() {
  while (ucp_worker_progress(worker_) != 0) {
  }
}

bool UcxWorker::poll_for(int microseconds, const std::atomic<bool>* wake) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(microseconds);
  do {
    if (ucp_worker_progress(worker_) != 0) {
      progress();
      return true;
    }
    if (wake && wake->load(std::memory_order_acquire)) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

void UcxWorker::wait(int timeout_ms) {
  ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_ERR_BUSY) return;  // events arrived meanwhile: progress again
  epoll_event ev{};
  epoll_wait(epoll_fd_, &ev, 1, timeout_ms);
}

void UcxWorker::signal() {
  ucp_worker_signal(worker_);
}

ucs_status_t wait_request(UcxWorker& worker, ucs_status_ptr_t request, double timeout_s) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  ucs_status_t s;
  while ((s = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    if (std::chrono::steady_clock::now() > deadline) {
      ucp_request_cancel(worker.worker(), request);
      worker.progress();
      s = UCS_ERR_TIMED_OUT;
      break;
    }
    worker.progress();
    worker.wait(10);
  }
  ucp_request_free(request);
  return s;
}

void close_endpoint(UcxWorker& worker, ucp_ep_h ep) {
  if (ep == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  wait_request(worker, ucp_ep_close_nbx(ep, &param), 2.0);
}

}  // namespace troupe
