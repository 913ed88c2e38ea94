// CpuStream: order, events, cross-stream waits, errors, and completion as a message.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace troupe
