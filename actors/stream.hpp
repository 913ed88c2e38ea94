// Stream: ordered asynchronous work on a device, and the way actors learn that it
// finished. Work enqueued on one stream runs in order; actors never block on it —
// they ask for a message when an Event completes (notify).
//
// CpuStream runs its work on one dedicated thread with a FIFO queue. CudaStream
// (actors/cuda_stream.hpp) fits the same interface: enqueue launches on a cudaStream_t,
// record() records a cudaEvent and completes the Event from a cudaLaunchHostFunc
// callback (which only completes it: no CUDA call), wait() is cudaStreamWaitEvent.
//
// Streams of a rank, and what each overlaps with:
//   compute — forward, backward and optimizer steps; overlaps with comm (the
//             transport's progress thread) and with the data loader's stream.
//   data    — prepares micro-batches ahead of compute; nobody waits on it blocking.
// Thread safety: every method may be called from any thread.
#pragma once

#include <caf/actor.hpp>
#include <caf/message.hpp>

#include <chrono>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/trace.hpp"

namespace troupe {

/// A point in a stream's work; completes when everything enqueued before it has run.
class Event {
 public:
  Event();
  /// An event that has already completed.
  static Event completed();
  bool done() const;
  /// Runs `callback` once the event completes (at once if it already has), on
  /// whichever thread completes it. The callback must be short and must not block.
  void on_complete(std::function<void()> callback) const;
  /// Marks the event complete and runs its callbacks. For stream implementations.
  void complete() const;
  /// Blocks until complete. Only for stream threads and tests, never for an actor.
  void wait() const;
  /// wait() for at most `timeout`; whether it completed.
  bool wait_for(std::chrono::milliseconds timeout) const;

  /// The device event behind it (a cudaEvent_t on a CudaStream), so another device stream
  /// can wait on the device instead of the host; null for host work. For stream
  /// implementations.
  void* device_event() const;
  void set_device_event(std::shared_ptr<void> event) const;
  /// Takes `other`'s device event, for an Event that completes with it.
  void share_device_event(const Event& other) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;
  /// Appends work; `label` names its span in the trace.
  virtual void enqueue(std::string label, std::function<void()> work) = 0;
  /// An event that completes when the work enqueued so far has run.
  virtual Event record() = 0;
  /// Work enqueued after this call waits for `event` (which may belong to another stream).
  virtual void wait(const Event& event) = 0;
  /// Appends a copy of `bytes` from `source` to `destination`, both valid until it ran
  /// (host memory on a CpuStream; host or device memory on a CudaStream).
  virtual void copy(void* destination, const void* source, std::size_t bytes, std::string label) = 0;
  /// The device stream behind it (a cudaStream_t), for kernels launched by enqueued work;
  /// null for host streams.
  virtual void* native_handle() const { return nullptr; }
  /// Delivers `message` to `actor` when `event` completes.
  void notify(const Event& event, caf::actor actor, caf::message message);
};

/// Called on the stream thread when work throws; the stream goes on with the next item.
using StreamErrorHandler = std::function<void(const std::string& what)>;

class CpuStream final : public Stream {
 public:
  /// Starts the stream's thread.
  static std::unique_ptr<CpuStream> make(std::string name, Tracer* tracer, StreamErrorHandler on_error);
  /// Runs what is queued, then stops the thread.
  ~CpuStream() override;

  const std::string& name() const override { return name_; }
  void enqueue(std::string label, std::function<void()> work) override;
  Event record() override;
  void wait(const Event& event) override;
  void copy(void* destination, const void* source, std::size_t bytes, std::string label) override;

 private:
  CpuStream(std::string name, Tracer* tracer, StreamErrorHandler on_error);
  void run();

  struct Item {
    std::string label;
    std::function<void()> work;
  };
  std::string name_;
  std::string track_;
  Tracer* tracer_;
  StreamErrorHandler on_error_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace troupe
