// A fixture for tests of actors that talk to the comm agent: the real agent over a
// transport of one rank (no bootstrap, no peers), in the test's own actor system.
#pragma once

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <memory>

#include "actors/comm_agent.hpp"
#include "transport/transport.hpp"

namespace troupe::testing {

class OneRankAgent : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions options;  // rank 0 of 1
    auto transport = Transport::make(options);
    ASSERT_TRUE(transport.ok()) << transport.error().message;
    agent_ = spawn_comm_agent(system_, std::shared_ptr<Transport>(std::move(*transport)), nullptr, &courier_);
  }
  void TearDown() override {
    if (agent_) caf::anon_send_exit(agent_, caf::exit_reason::user_shutdown);
  }

  caf::actor_system_config config_;
  caf::actor_system system_{config_};
  caf::actor agent_;
  Courier courier_;  // the agent's rank's
};

}  // namespace troupe::testing
