// The staged comm actor on host memory (CpuStreams standing in for the d2h and h2d CUDA
// streams), with the real comm agent in a world of one rank: each collective's input is
// copied out, reduced by the comm agent, copied back where the request asked, the reply
// carries the request's tag, what the request kept is let go first, and nothing starts
// before the request's ready event; staging buffers are pinned once and used again; a request
// on host memory passes through unstaged, in line.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "actors/comm_agent.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"
#include "actors/staged_comm.hpp"
#include "tests/support/collective_calls.hpp"
#include "tests/support/one_rank_agent.hpp"

namespace troupe {
namespace {

constexpr auto wait_bound = std::chrono::seconds(10);

class StagedCommTest : public testing::OneRankAgent {
 protected:
  void SetUp() override {
    OneRankAgent::SetUp();
    auto fail = [](const std::string& what) { ADD_FAILURE() << what; };
    StagedCommOptions o;
    o.comm_agent = agent_;
    o.d2h = std::shared_ptr<Stream>(CpuStream::make("d2h", nullptr, fail));
    o.h2d = std::shared_ptr<Stream>(CpuStream::make("h2d", nullptr, fail));
    o.places = world_place(0, 1);
    o.ledger = ledger_;
    o.pin = [pins = pins_, pinned = pinned_](void*, std::size_t) -> Result<std::shared_ptr<void>> {
      ++*pins;
      ++*pinned;
      return std::shared_ptr<void>(nullptr, [pinned](void*) { --*pinned; });
    };
    staged_ = spawn_staged_comm(system_, std::move(o));
  }
  void TearDown() override {
    caf::anon_send_exit(staged_, caf::exit_reason::user_shutdown);
    OneRankAgent::TearDown();
  }

  // Sends `r` and returns the tag of the reply (-1 none within the bound, -2 an error).
  int64_t run(testing::DeviceRequest r) {
    return testing::tag_of(testing::ask(system_, staged_, std::move(r), wait_bound));
  }

  std::shared_ptr<MemoryLedger> ledger_ = std::make_shared<MemoryLedger>();
  std::shared_ptr<std::atomic<int>> pins_ = std::make_shared<std::atomic<int>>(0);    // ever pinned
  std::shared_ptr<std::atomic<int>> pinned_ = std::make_shared<std::atomic<int>>(0);  // pinned now
  caf::actor staged_;
};

TEST_F(StagedCommTest, EveryCollectiveComesBackWhereTheRequestAskedWithItsTag) {
  std::vector<float> in(1000), out(1000, -1.0f);
  std::iota(in.begin(), in.end(), 1.0f);
  for (auto kind : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    std::fill(out.begin(), out.end(), -1.0f);
    EXPECT_EQ(run(testing::device_request(7, kind, in.data(), out.data(), in.size())), 7);
    EXPECT_EQ(out, in) << "one rank: the input, copied through the host to the output";
  }
  for (auto kind : {CollectiveKind::all_reduce, CollectiveKind::broadcast}) {
    std::vector<float> data = in;
    EXPECT_EQ(run(testing::device_request(9, kind, data.data(), data.data(), data.size())), 9);
    EXPECT_EQ(data, in) << "in place";
  }
  EXPECT_EQ(ledger_->peak()[MemoryKind::communication], 4000) << "staged through host memory";
}

TEST_F(StagedCommTest, StagingBuffersArePinnedOnceAndUsedAgain) {
  std::vector<float> data(1000, 1.0f), other(10, 1.0f);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(run(testing::device_request(i, CollectiveKind::all_reduce, data.data(), data.data(), 1000)), i);
  EXPECT_EQ(pins_->load(), 1) << "one buffer, pinned once, for four requests of one size";
  EXPECT_EQ(ledger_->current()[MemoryKind::communication], 4000) << "kept for the next request";
  EXPECT_EQ(run(testing::device_request(5, CollectiveKind::all_reduce, other.data(), other.data(), 10)), 5);
  EXPECT_EQ(pins_->load(), 2) << "another size, another buffer";
  caf::anon_send_exit(staged_, caf::exit_reason::user_shutdown);
  for (int i = 0; i < 200 && pinned_->load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(pinned_->load(), 0) << "unpinned when the actor goes";
  EXPECT_EQ(ledger_->current()[MemoryKind::communication], 0) << "and freed";
}

TEST_F(StagedCommTest, WhatTheRequestKeptIsLetGoBeforeTheReply) {
  std::vector<float> data(64, 2.0f);
  auto keep = std::make_shared<int>(1);
  std::weak_ptr<int> watch = keep;
  auto r = testing::device_request(3, CollectiveKind::all_reduce, data.data(), data.data(), data.size(), 0,
                                   std::move(keep));
  caf::scoped_actor self{system_};
  testing::send_device_request(self, staged_, std::move(r));
  bool expired_at_reply = false;
  self->receive([&](collective_done&) { expired_at_reply = watch.expired(); },
                caf::after(wait_bound) >> [] {});
  EXPECT_TRUE(expired_at_reply);
}

TEST_F(StagedCommTest, NothingStartsBeforeTheReadyEvent) {
  std::vector<float> in(16, 5.0f), out(16, 0.0f);
  Event ready;  // the producer's work, not finished yet
  auto r = testing::device_request(11, CollectiveKind::all_gather, in.data(), out.data(), in.size(), 0,
                                   nullptr, ready);
  caf::scoped_actor self{system_};
  testing::send_device_request(self, staged_, std::move(r));
  bool early = false;
  self->receive([&](collective_done&) { early = true; }, caf::after(std::chrono::milliseconds(200)) >> [] {});
  EXPECT_FALSE(early);
  EXPECT_EQ(out[0], 0.0f);
  ready.complete();
  int64_t tag = -1;
  self->receive([&](collective_done& d) { tag = static_cast<int64_t>(d.tag); },
                caf::after(wait_bound) >> [] {});
  EXPECT_EQ(tag, 11);
  EXPECT_EQ(out, in);
}

// A request on host memory needs no staging but keeps its place in line: behind a device
// request whose writer is not done, it does not reach the comm agent (whose collectives
// every rank must issue in one order) before that one does.
TEST_F(StagedCommTest, AHostRequestWaitsBehindTheDeviceRequestsBeforeIt) {
  std::vector<float> in(16, 5.0f), out(16, 0.0f);
  Event ready;  // the device request's writer, not finished yet
  auto held = testing::device_request(21, CollectiveKind::all_gather, in.data(), out.data(), in.size(), 0,
                                      nullptr, ready);
  auto host = std::make_shared<HostBuffer>(4 * sizeof(float));
  std::fill(host->as<float>(), host->as<float>() + 4, 3.0f);
  caf::scoped_actor self{system_};
  caf::actor me{self};
  testing::send_device_request(self, staged_, std::move(held));
  self->send(staged_, all_reduce_request{22, float_span(host, 0, 4), ReduceOp::sum, world_communicator, me});
  std::vector<uint64_t> order;
  self->receive([&](collective_done& d) { order.push_back(d.tag); },
                caf::after(std::chrono::milliseconds(200)) >> [] {});
  EXPECT_TRUE(order.empty()) << "the host request went ahead of the held device request";
  ready.complete();
  for (int i = 0; i < 2; ++i)
    self->receive(
        [&](collective_done& d) {
          EXPECT_EQ(d.error, "");
          order.push_back(d.tag);
        },
        caf::after(wait_bound) >> [] {});
  // Both went to the comm agent in line; the replies may cross (the device one is copied back first).
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, (std::vector<uint64_t>{21, 22}));
  EXPECT_EQ(host->as<float>()[3], 3.0f) << "one rank: the sum is the value";
  EXPECT_EQ(ledger_->peak()[MemoryKind::communication], 16 * sizeof(float)) << "only the device span staged";
}

}  // namespace
}  // namespace troupe
