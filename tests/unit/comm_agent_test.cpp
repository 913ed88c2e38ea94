// The comm agent's protocol in a world of one rank: every collective request returns at
// once and completes with a collective_done message carrying the requester's tag; actor
// messages to a registered (role, index) arrive, those to unknown ones are dropped.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>

#include "actors/comm_agent.hpp"
#include "actors/protocol/comm.hpp"

namespace troupe {
namespace {

constexpr auto wait_bound = std::chrono::seconds(10);

class CommAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions options;  // rank 0 of 1: no bootstrap, no peers
    auto transport = Transport::make(options);
    ASSERT_TRUE(transport.ok()) << transport.error().message;
    agent_ = spawn_comm_agent(system_, std::shared_ptr<Transport>(std::move(*transport)), nullptr);
  }
  void TearDown() override { caf::anon_send_exit(agent_, caf::exit_reason::user_shutdown); }

  // Sends `request` and returns the tag of the collective_done that comes back (or -1).
  template <class Request>
  int64_t complete(Request request) {
    caf::scoped_actor self{system_};
    request.reply_to = caf::actor{self};
    self->send(agent_, std::move(request));
    int64_t tag = -1;
    self->receive([&](collective_done& d) { tag = d.error.empty() ? static_cast<int64_t>(d.tag) : -2; },
                  caf::after(wait_bound) >> [] {});
    return tag;
  }

  static BufferSpan floats(std::vector<float> values) {
    auto buffer = std::make_shared<HostBuffer>(values.size() * sizeof(float));
    std::copy(values.begin(), values.end(), buffer->as<float>());
    return BufferSpan{buffer, 0, values.size(), DataType::f32};
  }

  caf::actor_system_config config_;
  caf::actor_system system_{config_};
  caf::actor agent_;
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

TEST_F(CommAgentTest, MessagesReachTheActorRegisteredUnderTheirAddress) {
  caf::scoped_actor self{system_};
  bool registered = false;
  self->request(agent_, wait_bound, register_actor{"worker", 2, caf::actor{self}})
      .receive([&](collective_done&) { registered = true; }, [](caf::error&) {});
  ASSERT_TRUE(registered);
  self->send(agent_, remote_send{0, "worker", 1, caf::make_message(int64_t{11})});  // nobody there: dropped
  self->send(agent_, remote_send{0, "worker", 2, caf::make_message(int64_t{42})});
  int64_t got = 0;
  self->receive([&](int64_t v) { got = v; }, caf::after(wait_bound) >> [] {});
  EXPECT_EQ(got, 42);
}

}  // namespace
}  // namespace troupe
