// IssuingStream: the compute stream of a GPU rank. LibTorch issues GPU work from a host
// thread — each operator launches kernels and returns — so the stage's forward and
// backward need both: a host thread that runs the work items in order, and the device
// stream the kernels they launch go to. Every item runs on the host thread inside
// `scope` (on a GPU rank: a TorchStreamGuard that makes the device stream LibTorch's
// current one), and an Event of this stream completes when the host has issued the
// work enqueued before it *and* the device has run it. (The issuing thread itself, or
// LibTorch's autograd thread in the middle of backward, records on the device stream
// directly: that covers what it has launched so far, without waiting on its own queue.)
//
//   enqueue          host thread, in order, inside the scope (on a GPU through the device
//                    stream's enqueue, so the trace shows the GPU's span as well as the host's)
//   record           an Event after the host work so far and the device work it issues
//   wait / copy      issued from the host thread, so they keep their place in line; the
//                    device stream waits and copies (the host goes on issuing)
//
// With a host stream as the device (a CpuStream: tests without a GPU) the host work is
// the work, so the host thread itself waits and copies; the protocol is the same.
// Thread safety: every method from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "actors/stream.hpp"

namespace troupe {

class IssuingStream final : public Stream {
 public:
  /// Entered around each work item on the host thread; the handle it returns is dropped
  /// when the item ends (null: no scope).
  using Scope = std::function<std::shared_ptr<void>()>;

  static std::unique_ptr<IssuingStream> make(std::string name, std::shared_ptr<Stream> device, Scope scope,
                                             Tracer* tracer, StreamErrorHandler on_error);
  /// Stops the host thread after what is queued has been issued.
  ~IssuingStream() override;

  const std::string& name() const override { return name_; }
  void enqueue(std::string label, std::function<void()> work) override;
  Event record() override;
  void wait(const Event& event) override;
  void copy(void* destination, const void* source, std::size_t bytes, std::string label) override;
  void* native_handle() const override { return device_->native_handle(); }

 private:
  IssuingStream(std::string name, std::shared_ptr<Stream> device, Scope scope);

  std::string name_;
  std::shared_ptr<Stream> device_;
  Scope scope_;
  std::unique_ptr<CpuStream> host_;  // last: its thread stops before the device goes
};

}  // namespace troupe
