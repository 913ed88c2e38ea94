// CudaStream: a Stream on a cudaStream_t of one GPU, so that actors drive GPU work and hear
// of its completion through messages, never by blocking (reference: caf-ucx-cuda.md §4).
//
//   enqueue  runs the work at once on the calling thread with the stream's device current;
//            the work launches kernels or copies on native() and must not synchronize. Two
//            host functions around it stamp the span the GPU spent on it for the trace.
//   record   records a cudaEvent and completes the Event from a cudaLaunchHostFunc
//            callback on the driver's thread; that callback makes no CUDA call: it only
//            marks the Event done and runs its callbacks (message sends). Device events
//            are pooled per device, so an Event dropped inside such a callback destroys
//            nothing there.
//   wait     on an Event of a device stream: cudaStreamWaitEvent, the dependency stays on
//            the GPU; on a host Event (a CpuStream's): a host function holds this stream
//            until that event completes.
//
// Streams are created non-blocking (never the legacy default stream); copy and
// communication streams get the device's high priority, as DeepSpeed and PyTorch give
// their NCCL and copy streams. A rank has four: compute, h2d, d2h and comm.
// Thread safety: every method from any thread; the CUDA runtime orders the launches.
#pragma once

#include <memory>
#include <string>

#include "actors/stream.hpp"
#include "base/result.hpp"

namespace troupe {

class CudaStream final : public Stream {
 public:
  enum class Priority { normal, high };

  /// A new stream on `device`; fails with the CUDA runtime's reason.
  static Result<std::unique_ptr<CudaStream>> make(std::string name, int device, Priority priority,
                                                  Tracer* tracer, StreamErrorHandler on_error);
  /// Waits (bounded) for the stream's work, then destroys it.
  ~CudaStream() override;

  const std::string& name() const override { return name_; }
  void enqueue(std::string label, std::function<void()> work) override;
  Event record() override;
  void wait(const Event& event) override;

  /// Enqueues an asynchronous copy of `bytes` (host or device memory either way, told
  /// apart by the CUDA runtime; host memory should be pinned, e.g. a PinnedPool's).
  void copy(void* destination, const void* source, std::size_t bytes, std::string label) override;

  /// The cudaStream_t, for launches inside enqueued work.
  void* native() const { return stream_; }
  void* native_handle() const override { return stream_; }
  int device() const { return device_; }

 private:
  CudaStream(std::string name, int device, Tracer* tracer, StreamErrorHandler on_error);
  void check(int error, const std::string& what);

  std::string name_, track_;
  int device_ = 0;
  Tracer* tracer_ = nullptr;
  StreamErrorHandler on_error_;
  void* stream_ = nullptr;
};

/// The named streams of a GPU rank.
struct CudaStreams {
  std::unique_ptr<CudaStream> compute, h2d, d2h, comm;
  static Result<CudaStreams> make(int device, Tracer* tracer, StreamErrorHandler on_error);
};

}  // namespace troupe
