#include "actors/cuda_stream.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace troupe {
namespace {

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

// What a host function gets: its owner deletes it after the call.
struct HostCall {
  std::function<void()> run;
  static void CUDART_CB trampoline(void* data) {
    std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
    try {
      call->run();
    } catch (...) {  // nothing may unwind into the driver's thread
    }
  }
};

cudaError_t launch_host(cudaStream_t stream, std::function<void()> run) {
  auto* call = new HostCall{std::move(run)};
  cudaError_t e = cudaLaunchHostFunc(stream, &HostCall::trampoline, call);
  if (e != cudaSuccess) delete call;
  return e;
}

// Device events whose last Event went away. An Event may die in a host callback on the
// driver's thread, where no CUDA call is allowed, so dropping one only files it here; the
// next record() on that device reuses it (a pool), from an ordinary thread.
class EventPool {
 public:
  void give_back(int device, cudaEvent_t event) {
    std::lock_guard lock(mutex_);
    free_[device].push_back(event);
  }
  cudaEvent_t take(int device) {
    std::lock_guard lock(mutex_);
    auto& events = free_[device];
    if (events.empty()) return nullptr;
    cudaEvent_t e = events.back();
    events.pop_back();
    return e;
  }

 private:
  std::mutex mutex_;
  std::map<int, std::vector<cudaEvent_t>> free_;
};

EventPool& event_pool() {
  static EventPool* pool = new EventPool();  // never destroyed: events may come back at exit
  return *pool;
}

}  // namespace

Result<std::unique_ptr<CudaStream>> CudaStream::make(std::string name, int device, Priority priority,
                                                     Tracer* tracer, StreamErrorHandler on_error) {
  std::unique_ptr<CudaStream> s(new CudaStream(std::move(name), device, tracer, std::move(on_error)));
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return make_error(
        fmt::format("stream {}: selecting GPU {} failed: {}", s->name_, device, cudaGetErrorString(e)));
  int least = 0, greatest = 0;  // numerically lower is higher priority
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking,
                                                   priority == Priority::high ? greatest : least);
      e != cudaSuccess)
    return make_error(fmt::format("stream {}: creating a CUDA stream on GPU {} failed: {}", s->name_, device,
                                  cudaGetErrorString(e)));
  s->stream_ = stream;
  return s;
}

CudaStream::CudaStream(std::string name, int device, Tracer* tracer, StreamErrorHandler on_error)
    : name_(std::move(name)),
      track_("gpu " + name_),
      device_(device),
      tracer_(tracer),
      on_error_(std::move(on_error)) {}

CudaStream::~CudaStream() {
  if (stream_ == nullptr) return;
  cudaSetDevice(device_);
  // Bounded: a stream held by a host Event that never completes must not hang shutdown.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cudaStreamQuery(as_stream(stream_)) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cudaStreamDestroy(as_stream(stream_));
}

void CudaStream::check(int error, const std::string& what) {
  if (error == cudaSuccess || !on_error_) return;
  on_error_(fmt::format("stream {} on GPU {}: {}: {}", name_, device_, what,
                        cudaGetErrorString(static_cast<cudaError_t>(error))));
}

void CudaStream::enqueue(std::string label, std::function<void()> work) {
  check(cudaSetDevice(device_), "selecting the device");
  auto start = std::make_shared<int64_t>(0);
  if (tracer_ && !label.empty())
    check(launch_host(as_stream(stream_), [start] { *start = Tracer::now_us(); }), label);
  try {
    work();
  } catch (const std::exception& e) {
    if (on_error_) on_error_(fmt::format("stream {}: {}: {}", name_, label, e.what()));
  }
  check(cudaGetLastError(), label);
  if (tracer_ && !label.empty())
    check(launch_host(as_stream(stream_), [tracer = tracer_, track = track_, label,
                                           start] { tracer->span(track, label, *start, Tracer::now_us()); }),
          label);
}

void CudaStream::copy(void* destination, const void* source, std::size_t bytes, std::string label) {
  enqueue(std::move(label), [this, destination, source, bytes] {
    check(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, as_stream(stream_)), "a copy");
  });
}

Event CudaStream::record() {
  Event event;
  check(cudaSetDevice(device_), "selecting the device");
  cudaEvent_t native = event_pool().take(device_);
  cudaError_t made =
      native != nullptr ? cudaSuccess : cudaEventCreateWithFlags(&native, cudaEventDisableTiming);
  if (made == cudaSuccess) {
    event.set_device_event(std::shared_ptr<void>(native, [device = device_](void* ev) {
      event_pool().give_back(device, static_cast<cudaEvent_t>(ev));
    }));
    check(cudaEventRecord(native, as_stream(stream_)), "recording an event");
  } else {
    check(made, "creating an event");
  }
  cudaError_t launched = launch_host(as_stream(stream_), [event] { event.complete(); });
  check(launched, "launching the completion callback");
  if (launched != cudaSuccess) event.complete();  // the error is reported; nobody waits forever
  return event;
}

void CudaStream::wait(const Event& event) {
  check(cudaSetDevice(device_), "selecting the device");
  if (void* native = event.device_event()) {
    check(cudaStreamWaitEvent(as_stream(stream_), static_cast<cudaEvent_t>(native), 0),
          "waiting for an event");
    return;
  }
  if (event.done()) return;
  // A host event: the driver's callback thread holds this stream until it completes.
  check(launch_host(as_stream(stream_), [event] { event.wait(); }), "waiting for a host event");
}

Result<CudaStreams> CudaStreams::make(int device, Tracer* tracer, StreamErrorHandler on_error) {
  CudaStreams s;
  auto open = [&](std::unique_ptr<CudaStream>& into, const char* name, CudaStream::Priority p) -> Status {
    auto made = CudaStream::make(name, device, p, tracer, on_error);
    if (!made) return made.error();
    into = std::move(*made);
    return {};
  };
  TROUPE_TRY(open(s.compute, "compute", CudaStream::Priority::normal));
  TROUPE_TRY(open(s.h2d, "h2d", CudaStream::Priority::high));
  TROUPE_TRY(open(s.d2h, "d2h", CudaStream::Priority::high));
  TROUPE_TRY(open(s.comm, "comm", CudaStream::Priority::high));
  return s;
}

}  // namespace troupe
