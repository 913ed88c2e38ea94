#include "actors/stream.hpp"

#include <caf/send.hpp>

#include <cstring>
#include <exception>

namespace troupe {

struct Event::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::vector<std::function<void()>> callbacks;
  std::shared_ptr<void> device_event;
};

Event::Event() : state_(std::make_shared<State>()) {}

Event Event::completed() {
  Event e;
  e.complete();
  return e;
}

bool Event::done() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

void Event::on_complete(std::function<void()> callback) const {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->done) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

void Event::complete() const {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->done = true;
    callbacks.swap(state_->callbacks);
  }
  state_->done_cv.notify_all();
  for (auto& callback : callbacks) callback();
}

void Event::wait() const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->done_cv.wait(lock, [this] { return state_->done; });
}

bool Event::wait_for(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->done_cv.wait_for(lock, timeout, [this] { return state_->done; });
}

void* Event::device_event() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->device_event.get();
}

void Event::set_device_event(std::shared_ptr<void> event) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->device_event = std::move(event);
}

void Event::share_device_event(const Event& other) const {
  std::shared_ptr<void> event;
  {
    std::lock_guard<std::mutex> lock(other.state_->mutex);
    event = other.state_->device_event;
  }
  set_device_event(std::move(event));
}

void Stream::notify(const Event& event, caf::actor actor, caf::message message) {
  // Moved into the send: nothing of the message stays with the callback, which may run on
  // a CUDA driver thread where destroying it (say, freeing device memory) is not allowed.
  event.on_complete([actor = std::move(actor), message = std::move(message)]() mutable {
    caf::anon_send(actor, std::move(message));
  });
}

std::unique_ptr<CpuStream> CpuStream::make(std::string name, Tracer* tracer, StreamErrorHandler on_error) {
  std::unique_ptr<CpuStream> stream(new CpuStream(std::move(name), tracer, std::move(on_error)));
  stream->thread_ = std::thread([s = stream.get()] { s->run(); });
  return stream;
}

CpuStream::CpuStream(std::string name, Tracer* tracer, StreamErrorHandler on_error)
    : name_(std::move(name)), track_("stream " + name_), tracer_(tracer), on_error_(std::move(on_error)) {}

CpuStream::~CpuStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CpuStream::copy(void* destination, const void* source, std::size_t bytes, std::string label) {
  enqueue(std::move(label), [destination, source, bytes] { std::memcpy(destination, source, bytes); });
}

void CpuStream::enqueue(std::string label, std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Item{std::move(label), std::move(work)});
  }
  ready_.notify_one();
}

Event CpuStream::record() {
  Event event;
  enqueue("", [event] { event.complete(); });
  return event;
}

void CpuStream::wait(const Event& event) {
  enqueue("", [event] { event.wait(); });
}

void CpuStream::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    Tracer::Scope span(item.label.empty() ? nullptr : tracer_, track_, item.label);
    try {
      item.work();
    } catch (const std::exception& e) {
      if (on_error_) on_error_(e.what());
    }
  }
}

}  // namespace troupe
