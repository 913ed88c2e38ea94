#include "actors/issuing_stream.hpp"

#include <exception>

namespace troupe {

std::unique_ptr<IssuingStream> IssuingStream::make(std::string name, std::shared_ptr<Stream> device,
                                                   Scope scope, Tracer* tracer, StreamErrorHandler on_error) {
  std::unique_ptr<IssuingStream> stream(new IssuingStream(name, std::move(device), std::move(scope)));
  stream->host_ = CpuStream::make(std::move(name), tracer, std::move(on_error));
  return stream;
}

IssuingStream::IssuingStream(std::string name, std::shared_ptr<Stream> device, Scope scope)
    : name_(std::move(name)), device_(std::move(device)), scope_(std::move(scope)) {}

IssuingStream::~IssuingStream() {
  host_.reset();  // issues what is queued; the device stream then drains in its own destructor
}

void IssuingStream::enqueue(std::string label, std::function<void()> work) {
  host_->enqueue(label, [device = device_, scope = scope_, label, work = std::move(work)] {
    std::shared_ptr<void> entered = scope ? scope() : nullptr;
    if (!device->native_handle()) return work();
    // Through the device stream's enqueue, which runs it here and stamps the span the GPU
    // spent on it in the trace; an error of the work stays this stream's.
    std::exception_ptr error;
    device->enqueue(label, [&] {
      try {
        work();
      } catch (...) {
        error = std::current_exception();
      }
    });
    if (error) std::rethrow_exception(error);
  });
}

Event IssuingStream::record() {
  Event event;
  // Recorded on the device once the host reaches this point, so it covers what the host
  // issued before; completed when the device gets there.
  host_->enqueue("", [device = device_, event] {
    Event recorded = device->record();
    event.share_device_event(recorded);  // a device stream waiting on it waits on the device
    recorded.on_complete([event] { event.complete(); });
  });
  return event;
}

// On a host "device" the host work is the work, so it waits and copies itself.
void IssuingStream::wait(const Event& event) {
  if (!device_->native_handle()) return host_->wait(event);
  host_->enqueue("", [device = device_, event] { device->wait(event); });
}

void IssuingStream::copy(void* destination, const void* source, std::size_t bytes, std::string label) {
  if (!device_->native_handle()) return host_->copy(destination, source, bytes, std::move(label));
  host_->enqueue("", [device = device_, destination, source, bytes, label = std::move(label)]() mutable {
    device->copy(destination, source, bytes, std::move(label));
  });
}

}  // namespace troupe
