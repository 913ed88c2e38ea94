// CUDA streams under the Stream interface: completion arrives as an Event (and so as a
// message) without any thread blocking on the GPU, device streams wait on each other on
// the device, a device stream waits for host work, and the trace holds each stream's
// spans on its own track, overlapping. Skips, saying why, where there is no usable GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/cuda_stream.hpp"
#include "kernels/cuda/precision.cuh"
#include "tests/gpu/gpu_test_support.hpp"

namespace troupe {
namespace {

using testing::DeviceArray;

std::unique_ptr<CudaStream> stream(const char* name, Tracer* tracer = nullptr) {
  auto made = CudaStream::make(name, 0, CudaStream::Priority::normal, tracer,
                               [](const std::string& what) { ADD_FAILURE() << what; });
  EXPECT_TRUE(made.ok()) << made.error().message;
  return made ? std::move(*made) : nullptr;
}

bool completes_within(const Event& e, std::chrono::seconds limit) {
  auto done = std::make_shared<std::promise<void>>();
  e.on_complete([done] { done->set_value(); });
  return done->get_future().wait_for(limit) == std::future_status::ready;
}

// Enough fp32 → bf16 casts of `n` elements that the GPU is busy for a while.
void busy(CudaStream& s, const DeviceArray<float>& in, DeviceArray<uint16_t>& out, std::size_t n, int times) {
  s.enqueue("casts", [&, n, times] {
    for (int i = 0; i < times; ++i)
      kernels::cuda::cast_from_f32(in.get(), out.get(), n, DataType::bf16,
                                   static_cast<cudaStream_t>(s.native()));
  });
}

TEST(CudaStream, RecordedEventsCompleteInStreamOrderWithoutBlocking) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto s = stream("compute");
  std::size_t n = 1 << 24;
  DeviceArray<float> in(std::vector<float>(n, 1.5f));
  DeviceArray<uint16_t> out(n);
  busy(*s, in, out, n, 20);
  Event first = s->record();
  busy(*s, in, out, n, 20);
  Event second = s->record();
  std::vector<int> order;
  std::mutex m;
  first.on_complete([&] {
    std::lock_guard l(m);
    order.push_back(1);
  });
  second.on_complete([&] {
    std::lock_guard l(m);
    order.push_back(2);
  });
  EXPECT_FALSE(second.done()) << "recording returns before the GPU ran the work";
  ASSERT_TRUE(completes_within(second, std::chrono::seconds(30)));
  std::lock_guard l(m);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(out.download()[n - 1], 0x3fc0) << "1.5 in bf16";
}

TEST(CudaStream, ADeviceStreamWaitsForAnotherOnTheDevice) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto producer = stream("h2d"), consumer = stream("compute");
  std::size_t n = 1 << 22;
  DeviceArray<float> a(n), b(n);
  std::vector<float> host(n, 2.0f);
  producer->enqueue("upload", [&] {
    cudaMemcpyAsync(a.get(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                    static_cast<cudaStream_t>(producer->native()));
  });
  Event uploaded = producer->record();
  consumer->wait(uploaded);
  consumer->enqueue("copy", [&] {
    cudaMemcpyAsync(b.get(), a.get(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                    static_cast<cudaStream_t>(consumer->native()));
  });
  ASSERT_TRUE(completes_within(consumer->record(), std::chrono::seconds(30)));
  EXPECT_EQ(b.download()[n / 2], 2.0f) << "the copy ran after the upload";
}

TEST(CudaStream, ADeviceStreamWaitsForHostWork) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto s = stream("comm");
  Event host;  // a CpuStream's event, completed by hand here
  s->wait(host);
  Event after = s->record();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(after.done()) << "held until the host event completes";
  host.complete();
  EXPECT_TRUE(completes_within(after, std::chrono::seconds(10)));
}

TEST(CudaStream, EachStreamHasItsTrackAndTheirSpansOverlap) {
  TROUPE_SKIP_WITHOUT_GPU();
  Tracer tracer(0);
  auto streams = CudaStreams::make(0, &tracer, [](const std::string& what) { ADD_FAILURE() << what; });
  ASSERT_TRUE(streams.ok()) << streams.error().message;
  std::size_t n = 1 << 24;
  DeviceArray<float> in(std::vector<float>(n, 1.0f));
  DeviceArray<uint16_t> out1(n), out2(n);
  // Long work on compute, then short work on comm: run one after the other, the short work
  // would end after the long; at once (comm has the higher priority), it ends first.
  busy(*streams->compute, in, out1, n, 40);
  busy(*streams->comm, in, out2, n, 2);
  ASSERT_TRUE(completes_within(streams->compute->record(), std::chrono::seconds(30)));
  ASSERT_TRUE(completes_within(streams->comm->record(), std::chrono::seconds(30)));
  std::string path = ::testing::TempDir() + "/cuda_stream_trace.json";
  ASSERT_TRUE(tracer.write(path).ok());
  std::ifstream file(path);
  nlohmann::json events = nlohmann::json::parse(file);
  std::map<int64_t, std::string> track_names;
  for (const auto& e : events)
    if (e.value("name", "") == "thread_name") track_names[e.at("tid")] = e.at("args").at("name");
  std::map<std::string, std::pair<double, double>> span_of;  // track -> [start, end]
  for (const auto& e : events)
    if (e.value("ph", "") == "X") {
      double start = e.at("ts"), end = start + e.at("dur").get<double>();
      span_of[track_names[e.at("tid")]] = {start, end};
    }
  ASSERT_TRUE(span_of.count("gpu compute") && span_of.count("gpu comm")) << events.dump();
  auto [a0, a1] = span_of["gpu compute"];
  auto [b0, b1] = span_of["gpu comm"];
  EXPECT_LT(std::max(a0, b0), std::min(a1, b1)) << "the two streams' spans overlap";
  EXPECT_LT(b1, a1) << "the comm stream's work ran while the compute stream's still did";
}

}  // namespace
}  // namespace troupe
