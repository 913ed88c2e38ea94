// CpuStream: order, events, cross-stream waits, errors, and completion as a message.
// IssuingStream: host work inside its scope, events after host and device work.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "actors/issuing_stream.hpp"
#include "actors/stream.hpp"

namespace troupe {
namespace {

TEST(CpuStream, RunsWorkInEnqueueOrder) {
  std::vector<int> order;
  {
    auto s = CpuStream::make("test", nullptr, nullptr);
    for (int i = 0; i < 100; ++i) s->enqueue("", [&order, i] { order.push_back(i); });
  }  // the destructor runs what is queued
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(CpuStream, EventCompletesAfterEarlierWork) {
  auto s = CpuStream::make("test", nullptr, nullptr);
  std::atomic<bool> ran{false};
  s->enqueue("", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ran = true;
  });
  Event e = s->record();
  e.wait();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(e.done());
}

TEST(CpuStream, WaitOrdersWorkAcrossStreams) {
  auto first = CpuStream::make("first", nullptr, nullptr);
  auto second = CpuStream::make("second", nullptr, nullptr);
  std::atomic<int> value{0};
  first->enqueue("", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    value = 1;
  });
  second->wait(first->record());
  std::atomic<int> seen{-1};
  second->enqueue("", [&] { seen = value.load(); });
  second->record().wait();
  EXPECT_EQ(seen.load(), 1);
}

TEST(CpuStream, ThrowingWorkIsReportedAndTheStreamGoesOn) {
  std::string error;
  auto s = CpuStream::make("test", nullptr, [&](const std::string& what) { error = what; });
  s->enqueue("", [] { throw std::runtime_error("boom"); });
  std::atomic<bool> after{false};
  s->enqueue("", [&] { after = true; });
  s->record().wait();
  EXPECT_EQ(error, "boom");
  EXPECT_TRUE(after.load());
}

TEST(CpuStream, NotifyDeliversAMessageToAnActor) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto s = CpuStream::make("test", nullptr, nullptr);
  s->enqueue("", [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  s->notify(s->record(), caf::actor{self}, caf::make_message(int64_t{42}));
  int64_t got = 0;
  self->receive([&](int64_t v) { got = v; }, caf::after(std::chrono::seconds(10)) >> [] {});
  EXPECT_EQ(got, 42);
}

TEST(CpuStream, TracesLabelledWorkOnItsOwnTrack) {
  Tracer tracer(0);
  {
    auto s = CpuStream::make("compute", &tracer, nullptr);
    s->enqueue("forward", [] {});
    s->record().wait();
  }
  EXPECT_EQ(tracer.size(), 1u);
}

// An IssuingStream over a CpuStream "device": what its host work issues runs there.
struct Issuing {
  std::shared_ptr<CpuStream> device = CpuStream::make("device", nullptr, nullptr);
  std::atomic<int> scopes{0};
  std::unique_ptr<IssuingStream> stream = IssuingStream::make(
      "compute", device,
      [this] {
        ++scopes;
        return std::shared_ptr<void>(nullptr, [this](void*) { --scopes; });
      },
      nullptr, nullptr);
};

TEST(IssuingStream, RunsEachItemInsideItsScope) {
  Issuing s;
  std::vector<int> inside;
  for (int i = 0; i < 3; ++i) s.stream->enqueue("", [&] { inside.push_back(s.scopes.load()); });
  s.stream->record().wait();
  EXPECT_EQ(inside, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(s.scopes.load(), 0);
}

TEST(IssuingStream, RecordCompletesAfterTheDeviceWorkTheHostIssued) {
  Issuing s;
  std::atomic<bool> device_ran{false};
  s.stream->enqueue("", [&] {
    s.device->enqueue("", [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      device_ran = true;
    });
  });
  Event e = s.stream->record();
  e.wait();
  EXPECT_TRUE(device_ran.load());
}

// What the stage does mid-backward: record on the device stream from the issuing thread.
TEST(IssuingStream, TheDeviceStreamsRecordCoversOnlyWhatWasLaunched) {
  Issuing s;
  std::atomic<bool> later{false};
  Event launched;
  s.stream->enqueue("", [&] {
    launched = s.device->record();  // from the issuing thread: no wait on itself
    launched.wait();
    s.device->enqueue("", [&] { later = true; });
  });
  s.stream->record().wait();
  EXPECT_TRUE(launched.done());
  EXPECT_TRUE(later.load());
}

TEST(IssuingStream, CopiesAndWaitsKeepTheirPlaceInLine) {
  Issuing s;
  auto other = CpuStream::make("other", nullptr, nullptr);
  std::atomic<bool> gate{false};
  other->enqueue("", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate = true;
  });
  int source = 7, destination = 0;
  bool gated_before_copy = false;
  s.stream->wait(other->record());
  s.stream->enqueue("", [&] { gated_before_copy = gate.load(); });
  s.stream->copy(&destination, &source, sizeof source, "copy");
  s.stream->record().wait();
  EXPECT_TRUE(gated_before_copy);
  EXPECT_EQ(destination, 7);
}

}  // namespace
}  // namespace troupe
