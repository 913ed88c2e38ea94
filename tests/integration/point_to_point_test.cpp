// Point-to-point transfers through the comm agents of two ranks, over the real UCX
// transport (two transports bootstrapped in this process): the receiver posts a few
// receives ahead (the credits a pipeline stage keeps), the sender streams tensors, and
// every tensor arrives whole, in order, each request answered with its own tag; byte
// counts that disagree fail the receive and stop the job, corrupting nothing.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/comm_agent.hpp"
#include "actors/protocol/comm.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

constexpr auto wait_bound = std::chrono::seconds(20);

struct TwoRanks {
  std::shared_ptr<Transport> rank0, rank1;
};

// Both ranks of a world of two, bootstrapped concurrently as two processes would be.
TwoRanks two_ranks() {
  TransportOptions o;
  o.world_size = 2;
  o.coordinator_port = static_cast<uint16_t>(testing::free_port());
  o.bootstrap_timeout_s = 20;
  o.collective_timeout_s = 10;
  TransportOptions o1 = o;
  o1.rank = 1;
  Result<std::unique_ptr<Transport>> second = make_error("not started");
  std::thread joiner([&] { second = Transport::make(o1); });
  auto first = Transport::make(o);
  joiner.join();
  EXPECT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(second.ok()) << second.error().message;
  if (!first.ok() || !second.ok()) return {};
  return TwoRanks{std::move(*first), std::move(*second)};
}

BufferSpan filled(std::size_t count, float value) {
  auto buffer = std::make_shared<HostBuffer>(count * sizeof(float));
  std::fill(buffer->as<float>(), buffer->as<float>() + count, value);
  return float_span(buffer, 0, count);
}

// Answers until `count` collective_done messages came, or the bound passed.
std::vector<collective_done> answers(caf::scoped_actor& self, std::size_t count) {
  std::vector<collective_done> got;
  bool timed_out = false;
  while (got.size() < count && !timed_out)
    self->receive([&](collective_done& d) { got.push_back(std::move(d)); },
                  caf::after(wait_bound) >> [&] { timed_out = true; });
  return got;
}

// The comm agents of both ranks in this process's actor system.
class PointToPoint : public ::testing::Test {
 protected:
  void SetUp() override {
    TwoRanks ranks = two_ranks();
    ASSERT_TRUE(ranks.rank0 && ranks.rank1);
    agent0_ = spawn_comm_agent(system_, ranks.rank0, nullptr);
    agent1_ = spawn_comm_agent(system_, ranks.rank1, nullptr);
  }
  void TearDown() override {
    for (const caf::actor& agent : {agent0_, agent1_})
      if (agent) caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  }

  caf::actor_system_config config_;
  caf::actor_system system_{config_};
  caf::actor agent0_, agent1_;
};

TEST_F(PointToPoint, TensorsStreamedThroughTheAgentsArriveWholeAndInOrder) {
  caf::scoped_actor sender{system_}, receiver{system_};
  constexpr std::size_t tensors = 24, credits = 3, count = 100000;  // 400 KB each: several chunks
  std::vector<BufferSpan> received;
  auto post_receive = [&](std::size_t i) {
    received.push_back(filled(count, -1));
    receiver->send(agent1_, recv_request{1000 + i, received.back(), 0, caf::actor{receiver}, std::nullopt});
  };
  for (std::size_t i = 0; i < credits; ++i) post_receive(i);
  for (std::size_t i = 0; i < tensors; ++i)
    sender->send(agent0_,
                 send_request{i, filled(count, static_cast<float>(i)), 1, caf::actor{sender}, std::nullopt});
  // Each arrival frees a credit: the next receive is posted then, as a stage would.
  std::vector<uint64_t> arrived;
  while (arrived.size() < tensors) {
    auto got = answers(receiver, 1);
    ASSERT_EQ(got.size(), 1u) << "no arrival within the bound after " << arrived.size();
    ASSERT_TRUE(got[0].error.empty()) << got[0].error;
    arrived.push_back(got[0].tag);
    if (received.size() < tensors) post_receive(received.size());
  }
  for (std::size_t i = 0; i < tensors; ++i) {
    EXPECT_EQ(arrived[i], 1000 + i) << "receives complete in the order they were posted";
    const float* values = received[i].owner->as<float>();
    EXPECT_EQ(values[0], static_cast<float>(i));
    EXPECT_EQ(values[count - 1], static_cast<float>(i)) << "tensor " << i << " arrived whole";
  }
  auto sent = answers(sender, tensors);
  ASSERT_EQ(sent.size(), tensors);
  for (std::size_t i = 0; i < tensors; ++i) {
    EXPECT_TRUE(sent[i].error.empty()) << sent[i].error;
    EXPECT_EQ(sent[i].tag, i);
  }
}

// Keyed messages match by key, not by order: receives posted in reverse of the sends land
// each in the buffer of its own key, and sequenced messages between the same ranks are
// untouched by them (virtual stages send several kinds of message to one peer).
TEST_F(PointToPoint, KeyedMessagesMatchTheirKeyWhateverTheOrder) {
  caf::scoped_actor sender{system_}, receiver{system_};
  constexpr std::size_t messages = 6, count = 70000;  // 280 KB each: rendezvous, several chunks
  std::vector<BufferSpan> received(messages);
  for (std::size_t i = messages; i-- > 0;) {
    received[i] = filled(count, -1);
    receiver->send(agent1_, recv_request{i, received[i], 0, caf::actor{receiver}, uint64_t{500 + i}});
  }
  receiver->send(agent1_, recv_request{99, filled(8, -1), 0, caf::actor{receiver}, std::nullopt});
  sender->send(agent0_, send_request{99, filled(8, 7), 1, caf::actor{sender}, std::nullopt});
  for (std::size_t i = 0; i < messages; ++i)
    sender->send(agent0_, send_request{i, filled(count, static_cast<float>(i)), 1, caf::actor{sender},
                                       uint64_t{500 + i}});
  auto got = answers(receiver, messages + 1);
  ASSERT_EQ(got.size(), messages + 1);
  for (const auto& d : got) EXPECT_TRUE(d.error.empty()) << d.error;
  for (std::size_t i = 0; i < messages; ++i) {
    EXPECT_EQ(received[i].owner->as<float>()[0], static_cast<float>(i)) << "key " << 500 + i;
    EXPECT_EQ(received[i].owner->as<float>()[count - 1], static_cast<float>(i)) << "key " << 500 + i;
  }
  EXPECT_EQ(answers(sender, messages + 1).size(), messages + 1);
}

// A receive's arrival event (what a pipeline stage's compute waits on, on its stream) is
// complete, and ok, once its bytes are in and before the requester hears collective_done;
// a receive that fails completes it too, not ok, so nothing waits on it for ever.
TEST_F(PointToPoint, AnArrivalCompletesAsTheBytesLandAndOnFailureToo) {
  caf::scoped_actor sender{system_}, receiver{system_};
  constexpr std::size_t count = 262144;  // 1 MiB: an activation between stages
  BufferSpan into = filled(count, -1);
  auto arrival = std::make_shared<ReceiveArrival>();
  recv_request r{7, into, 0, caf::actor{receiver}, uint64_t{9}};
  r.arrival = arrival;
  receiver->send(agent1_, std::move(r));
  EXPECT_FALSE(arrival->arrived.done()) << "nothing sent yet";
  sender->send(agent0_, send_request{7, filled(count, 3), 1, caf::actor{sender}, uint64_t{9}});
  ASSERT_TRUE(arrival->arrived.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(wait_bound)));
  EXPECT_TRUE(arrival->ok);
  EXPECT_EQ(into.owner->as<float>()[count - 1], 3.0f) << "complete means the bytes are in";
  auto got = answers(receiver, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].error.empty()) << got[0].error;
  answers(sender, 1);

  auto failing = std::make_shared<ReceiveArrival>();
  recv_request bad{8, filled(10, 0), 0, caf::actor{receiver}, uint64_t{10}};
  bad.arrival = failing;
  receiver->send(agent1_, std::move(bad));
  sender->send(agent0_, send_request{8, filled(12, 1), 1, caf::actor{sender}, uint64_t{10}});
  ASSERT_TRUE(failing->arrived.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(wait_bound)));
  EXPECT_FALSE(failing->ok) << "10 floats expected, 12 sent";
  answers(receiver, 1);
  answers(sender, 1);
}

TEST_F(PointToPoint, ByteCountsThatDisagreeFailTheReceiveAndStopTheJob) {
  caf::scoped_actor sender{system_}, receiver{system_};
  receiver->send(agent1_, recv_request{2, filled(10, 0), 0, caf::actor{receiver}, std::nullopt});
  sender->send(agent0_, send_request{1, filled(12, 1), 1, caf::actor{sender}, std::nullopt});
  auto got = answers(receiver, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].error.empty()) << "10 floats expected, 12 sent";
  answers(sender, 1);  // the small send may well have completed before the failure
  // The receiver's failure stops the whole job: rank 0's next receive fails too, at once
  // or when rank 1's abort arrives, not at its own timeout.
  auto asked = std::chrono::steady_clock::now();
  sender->send(agent0_, recv_request{3, filled(10, 0), 1, caf::actor{sender}, std::nullopt});
  auto stopped = answers(sender, 1);
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_FALSE(stopped[0].error.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(5)) << stopped[0].error;
}

}  // namespace
}  // namespace troupe
