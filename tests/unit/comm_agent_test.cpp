// The comm agent's protocol in a world of one rank: every collective request returns at
// once and completes with a collective_done message carrying the requester's tag; actor
// messages to a registered (role, index) arrive, those to unknown ones are dropped; a
// collective's buffers are freed before its requester hears that it is done.
#include <gtest/gtest.h>

#include <sched.h>

#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/comm_agent.hpp"
#include "actors/protocol/comm.hpp"
#include "tests/support/collective_calls.hpp"
#include "tests/support/one_rank_agent.hpp"

namespace troupe {
namespace {

constexpr auto wait_bound = std::chrono::seconds(10);

class CommAgentTest : public testing::OneRankAgent {
 protected:
  // Sends `request` and returns the tag of the collective_done that comes back (-1 none, -2 an error).
  template <class Request>
  int64_t complete(Request request) {
    return testing::tag_of(testing::ask(system_, agent_, std::move(request), wait_bound));
  }

  // Registers `self` with the agent under (role, index); whether the agent confirmed it.
  bool register_as(caf::scoped_actor& self, const std::string& role, int64_t index) {
    bool registered = false;
    self->request(agent_, wait_bound, register_actor{role, index, caf::actor{self}})
        .receive([&](collective_done&) { registered = true; }, [](caf::error&) {});
    return registered;
  }

  static BufferSpan floats(std::vector<float> values) {
    auto buffer = std::make_shared<HostBuffer>(values.size() * sizeof(float));
    std::copy(values.begin(), values.end(), buffer->as<float>());
    return BufferSpan{buffer, 0, values.size(), DataType::f32};
  }
};

TEST_F(CommAgentTest, ReduceScatterRequestCompletesWithItsTag) {
  auto in = floats({1, 2, 3}), out = floats({0, 0, 0});
  EXPECT_EQ(complete(reduce_scatter_request{7, in, out, ReduceOp::sum, world_communicator, {}}), 7);
  EXPECT_EQ(out.owner->as<float>()[2], 3.0f);
}

TEST_F(CommAgentTest, AllGatherAndBroadcastRequestsCompleteWithTheirTags) {
  auto in = floats({4, 5}), out = floats({0, 0});
  EXPECT_EQ(complete(all_gather_request{8, in, out, world_communicator, {}}), 8);
  EXPECT_EQ(out.owner->as<float>()[1], 5.0f);
  EXPECT_EQ(complete(broadcast_request{9, in, 0, world_communicator, {}}), 9);
}

TEST_F(CommAgentTest, ACollectiveOnAnUnknownCommunicatorFailsWithAnError) {
  auto in = floats({1}), out = floats({0});
  EXPECT_EQ(complete(all_gather_request{3, in, out, 17, {}}), -2);
}

// Requests 1 and 2 were sent behind `writer`: nothing answers before it completes (`why`
// says what may not run), then both, in order.
void expect_held_until_written(caf::scoped_actor& self, Event& writer, const char* why) {
  bool early = false;
  self->receive([&](collective_done&) { early = true; }, caf::after(std::chrono::milliseconds(200)) >> [] {});
  EXPECT_FALSE(early) << why;
  writer.complete();
  std::vector<uint64_t> order;
  for (int i = 0; i < 2; ++i)
    self->receive([&](collective_done& d) { order.push_back(d.tag); }, caf::after(wait_bound) >> [] {});
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2}));
}

// A span's writer not done yet holds its request back, and the ones after it: every rank
// issues its collectives in the order they were asked for, each once its bytes are whole.
TEST_F(CommAgentTest, ARequestWaitsForItsSpansWriterAndHoldsBackTheNext) {
  auto first = floats({1}), second = floats({2});
  Event writer;  // work that has not written `first` yet
  first.ready = writer;
  caf::scoped_actor self{system_};
  self->send(agent_, all_reduce_request{1, first, ReduceOp::sum, world_communicator, caf::actor{self}});
  self->send(agent_, all_reduce_request{2, second, ReduceOp::sum, world_communicator, caf::actor{self}});
  expect_held_until_written(self, writer, "neither may run before the first one's writer is done");
}

// A barrier is one of the world's collectives: it keeps its place behind a held request.
TEST_F(CommAgentTest, ABarrierWaitsBehindAHeldRequest) {
  auto held = floats({1});
  Event writer;
  held.ready = writer;
  caf::scoped_actor self{system_};
  self->send(agent_, all_reduce_request{1, held, ReduceOp::sum, world_communicator, caf::actor{self}});
  self->send(agent_, barrier_request{2, caf::actor{self}});
  expect_held_until_written(self, writer, "the barrier may not overtake the held all-reduce");
}

// The transport moves host memory; a span in device memory is refused with the reason.
TEST_F(CommAgentTest, ASpanInDeviceMemoryIsRefusedSayingWhere) {
  float value = 1;
  auto keep = std::make_shared<int>(0);
  std::weak_ptr<int> watch = keep;
  caf::scoped_actor self{system_};
  self->send(agent_, all_reduce_request{5, testing::device_span(&value, 1, std::move(keep)), ReduceOp::sum,
                                        world_communicator, caf::actor{self}});
  std::string error;
  bool released = false;
  self->receive(
      [&](collective_done& d) {
        error = d.error;
        released = watch.expired();
      },
      caf::after(wait_bound) >> [] {});
  EXPECT_NE(error.find(" is in device 0 memory (device spans go to the rank's device collectives)"),
            std::string::npos)
      << error;
  EXPECT_TRUE(released) << "the request's buffers are let go before the requester hears";
}

TEST_F(CommAgentTest, MessagesReachTheActorRegisteredUnderTheirAddress) {
  caf::scoped_actor self{system_};
  ASSERT_TRUE(register_as(self, "worker", 2));
  self->send(agent_, remote_send{0, "worker", 1, caf::make_message(int64_t{11})});  // nobody there: dropped
  self->send(agent_, remote_send{0, "worker", 2, caf::make_message(int64_t{42})});
  int64_t got = 0;
  self->receive([&](int64_t v) { got = v; }, caf::after(wait_bound) >> [] {});
  EXPECT_EQ(got, 42);
}

// The courier delivers from the caller's thread: here to the actor registered on this
// rank; once the agent has ended it sends nothing and says so.
TEST_F(CommAgentTest, TheCourierDeliversToRegisteredActorsUntilTheAgentEnds) {
  caf::scoped_actor self{system_};
  ASSERT_TRUE(register_as(self, "worker", 3));
  EXPECT_TRUE(courier_.send(0, "worker", 3, caf::make_message(int64_t{7})));
  int64_t got = 0;
  self->receive([&](int64_t v) { got = v; }, caf::after(wait_bound) >> [] {});
  EXPECT_EQ(got, 7);
  EXPECT_FALSE(Courier().send(0, "worker", 3, caf::make_message(int64_t{8}))) << "no courier: nothing sent";
  self->send_exit(agent_, caf::exit_reason::user_shutdown);
  self->wait_for(agent_);
  agent_ = caf::actor{};
  EXPECT_FALSE(courier_.send(0, "worker", 3, caf::make_message(int64_t{9})));
  self->receive([&](int64_t v) { got = v; }, caf::after(std::chrono::milliseconds(100)) >> [] {});
  EXPECT_EQ(got, 7) << "nothing arrives once the agent has ended";
}

// Pins the calling thread, and the threads it makes from now on, to its first CPU; the
// thread's CPUs are as before again when this goes.
class OneCpu {
 public:
  OneCpu() {
    if (sched_getaffinity(0, sizeof before_, &before_) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &before_)) {
        CPU_SET(cpu, &one);
        break;
      }
    pinned_ = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~OneCpu() {
    if (pinned_) sched_setaffinity(0, sizeof before_, &before_);
  }
  OneCpu(const OneCpu&) = delete;
  OneCpu& operator=(const OneCpu&) = delete;
  bool pinned() const { return pinned_; }

 private:
  cpu_set_t before_{};
  bool pinned_ = false;
};

// The agent lets a collective's buffers go before the requester hears that it is done,
// and keeps no other handle to them: a requester that dropped its own then finds them
// freed (ZeRO stage 3 frees a gathered row this way, and the step's memory peak counts
// it). A handle the agent's thread still held after its call into the transport would
// be let go only when that thread runs on, after the progress thread may have completed
// the collective; so here the agent's thread is made to run on last: every thread of
// the test shares one CPU and the actor system's one scheduler thread, which runs the
// agent, only gets it when nothing else wants it. Then such a handle is caught every time.
TEST(CommAgentBuffers, ACollectivesBuffersAreFreedBeforeItsRequesterHearsItIsDone) {
  OneCpu one_cpu;  // before the actor system and the transport: their threads share it
  caf::actor_system_config config;
  config.set("scheduler.max-threads", 1);
  caf::actor_system system{config};
  auto transport = Transport::make(TransportOptions{});
  ASSERT_TRUE(transport.ok()) << transport.error().message;
  caf::actor agent = spawn_comm_agent(system, std::shared_ptr<Transport>(std::move(*transport)), nullptr);
  caf::scoped_actor self{system};
  auto idle = system.spawn([]() -> caf::behavior {
    return {[](int32_t) {
      sched_param none{};
      return int32_t{sched_setscheduler(0, SCHED_IDLE, &none)};
    }};
  });
  int32_t made_idle = -1;
  self->request(idle, wait_bound, int32_t{0})
      .receive([&](int32_t rc) { made_idle = rc; }, [](caf::error&) {});
  if (!one_cpu.pinned() || made_idle != 0)
    std::printf(
        "note: the agent's thread could not be made to run last (pinned %d, idle %d): a "
        "late handle would be caught only by chance\n",
        one_cpu.pinned(), made_idle);

  using Request = std::function<caf::message(BufferSpan in, BufferSpan out, caf::actor me)>;
  const std::vector<std::pair<std::string, Request>> requests = {
      {"all_reduce",
       [](BufferSpan in, BufferSpan, caf::actor me) {
         return caf::make_message(
             all_reduce_request{1, std::move(in), ReduceOp::sum, world_communicator, me});
       }},
      {"reduce_scatter",
       [](BufferSpan in, BufferSpan out, caf::actor me) {
         return caf::make_message(
             reduce_scatter_request{2, std::move(in), std::move(out), ReduceOp::sum, world_communicator, me});
       }},
      {"all_gather",
       [](BufferSpan in, BufferSpan out, caf::actor me) {
         return caf::make_message(
             all_gather_request{3, std::move(in), std::move(out), world_communicator, me});
       }},
      {"broadcast",
       [](BufferSpan in, BufferSpan, caf::actor me) {
         return caf::make_message(broadcast_request{4, std::move(in), 0, world_communicator, me});
       }},
  };
  for (const auto& [name, request] : requests)
    for (int i = 0; i < 20; ++i) {
      SCOPED_TRACE(name + " #" + std::to_string(i));
      auto in = std::make_shared<HostBuffer>(4 * sizeof(float));
      auto out = std::make_shared<HostBuffer>(4 * sizeof(float));
      std::weak_ptr<HostBuffer> in_seen = in, out_seen = out;
      self->send(agent, request(BufferSpan{std::move(in), 0, 4, DataType::f32},
                                BufferSpan{std::move(out), 0, 4, DataType::f32}, caf::actor{self}));
      bool done = false, in_freed = false, out_freed = false;
      self->receive(
          [&](collective_done& d) {
            done = d.error.empty();
            in_freed = in_seen.expired();  // the agent's thread has not run since the completion
            out_freed = out_seen.expired();
          },
          caf::after(wait_bound) >> [] {});
      ASSERT_TRUE(done);
      EXPECT_TRUE(in_freed) << "the agent still held a handle to the input when the requester heard";
      EXPECT_TRUE(out_freed) << "the agent still held a handle to the output when the requester heard";
    }
  caf::anon_send_exit(idle, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace troupe
