// The arithmetic of ring collectives and the collective state machines, run over an
// in-process fake transport (the real one is tested across processes in integration/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <vector>

#include "transport/collective.hpp"
#include "transport/ring.hpp"

namespace troupe {
namespace {

TEST(Ring, SegmentsCoverTheBufferExactlyOnce) {
  for (std::size_t count : {0u, 1u, 2u, 7u, 100u, 1001u}) {
    for (int64_t world : {1, 2, 3, 4, 8}) {
      std::size_t next = 0;
      for (int64_t s = 0; s < world; ++s) {
        auto span = ring::segment(count, world, s);
        EXPECT_EQ(span.begin, next);
        next += span.count;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(Ring, OddSizeGivesTheRemainderToTheFirstSegments) {
  EXPECT_EQ(ring::segment(10, 4, 0).count, 3u);
  EXPECT_EQ(ring::segment(10, 4, 1).count, 3u);
  EXPECT_EQ(ring::segment(10, 4, 2).count, 2u);
  EXPECT_EQ(ring::segment(10, 4, 3).count, 2u);
}

TEST(Ring, ReduceScatterEndsWithEachRankOwningTheNextSegment) {
  for (int64_t world : {2, 3, 5}) {
    for (int64_t r = 0; r < world; ++r) {
      auto last = ring::all_reduce_step(r, world, world - 2);
      EXPECT_TRUE(last.reduce);
      EXPECT_EQ(last.recv_segment, ring::owned_segment(r, world));
    }
  }
}

TEST(Ring, EachStepReceivesWhatTheLeftNeighbourSends) {
  for (int64_t world : {2, 3, 4, 7}) {
    for (int64_t step = 0; step < ring::all_reduce_steps(world); ++step) {
      for (int64_t r = 0; r < world; ++r) {
        int64_t left = (r + world - 1) % world;
        EXPECT_EQ(ring::all_reduce_step(r, world, step).recv_segment,
                  ring::all_reduce_step(left, world, step).send_segment);
      }
    }
  }
}

// Delivers sends to matching receives between in-process ranks, in FIFO order.
class FakeNetwork {
 public:
  struct Posted {
    int64_t rank;
    int64_t peer;
    void* data;
    std::size_t bytes;
    uint64_t op;
    uint64_t chunk;
  };
  class Io : public TransferIo {
   public:
    Io(FakeNetwork& net, int64_t rank) : net_(net), rank_(rank) {}
    void post_send(int64_t peer, const void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                   uint64_t chunk) override {
      net_.sends[tag].push_back({rank_, peer, const_cast<void*>(data), bytes, op, chunk});
    }
    void post_recv(int64_t peer, void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                   uint64_t chunk) override {
      net_.recvs[tag].push_back({rank_, peer, data, bytes, op, chunk});
    }

   private:
    FakeNetwork& net_;
    int64_t rank_;
  };
  std::map<uint64_t, std::deque<Posted>> sends, recvs;
};

void run_to_completion(std::vector<std::unique_ptr<Collective>>& ops, FakeNetwork& net,
                       std::vector<std::unique_ptr<FakeNetwork::Io>>& ios) {
  for (std::size_t r = 0; r < ops.size(); ++r) ops[r]->start(*ios[r]);
  for (int round = 0; round < 1000000; ++round) {
    auto it = std::find_if(net.sends.begin(), net.sends.end(),
                           [&](auto& kv) { return !kv.second.empty() && !net.recvs[kv.first].empty(); });
    if (it == net.sends.end()) break;
    auto send = it->second.front();
    auto recv = net.recvs[it->first].front();
    it->second.pop_front();
    net.recvs[it->first].pop_front();
    ASSERT_EQ(send.bytes, recv.bytes);
    ASSERT_EQ(send.peer, recv.rank);
    ASSERT_EQ(recv.peer, send.rank);
    std::memcpy(recv.data, send.data, send.bytes);
    ops[send.rank]->on_transfer(*ios[send.rank], send.chunk);
    ops[recv.rank]->on_transfer(*ios[recv.rank], recv.chunk);
  }
  for (auto& op : ops) EXPECT_TRUE(op->done()) << op->describe();
}

TEST(Collective, AllReduceOverFakeNetworkSumsEveryElement) {
  for (int64_t world : {1, 2, 3, 4}) {
    for (std::size_t count : {0u, 1u, 3u, 17u, 1000u}) {
      FakeNetwork net;
      std::vector<std::vector<float>> data(world);
      std::vector<std::unique_ptr<Collective>> ops;
      std::vector<std::unique_ptr<FakeNetwork::Io>> ios;
      for (int64_t r = 0; r < world; ++r) {
        data[r].resize(count);
        for (std::size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>(r * 100 + i % 7);
        ios.push_back(std::make_unique<FakeNetwork::Io>(net, r));
        CollectiveShape shape{5, r, world, 16, 3};  // tiny chunks, few in flight
        ops.push_back(make_all_reduce(shape, data[r].data(), count, ReduceOp::sum));
      }
      run_to_completion(ops, net, ios);
      for (int64_t r = 0; r < world; ++r)
        for (std::size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int64_t q = 0; q < world; ++q) expected += static_cast<float>(q * 100 + i % 7);
          ASSERT_EQ(data[r][i], expected) << "world " << world << " count " << count << " rank " << r;
        }
    }
  }
}

TEST(Collective, BroadcastOverFakeNetworkCopiesTheRootEverywhere) {
  for (int64_t world : {1, 2, 4}) {
    for (int64_t root = 0; root < world; ++root) {
      FakeNetwork net;
      std::vector<std::vector<float>> data(world, std::vector<float>(33));
      std::vector<std::unique_ptr<Collective>> ops;
      std::vector<std::unique_ptr<FakeNetwork::Io>> ios;
      for (int64_t r = 0; r < world; ++r) {
        std::iota(data[r].begin(), data[r].end(), static_cast<float>(r * 1000));
        ios.push_back(std::make_unique<FakeNetwork::Io>(net, r));
        ops.push_back(make_broadcast(CollectiveShape{9, r, world, 8, 2}, data[r].data(), 33, root));
      }
      run_to_completion(ops, net, ios);
      for (int64_t r = 0; r < world; ++r) EXPECT_EQ(data[r], data[root]);
    }
  }
}

TEST(Collective, TagsOfDifferentOperationsChunksStepsAndSendersDiffer) {
  EXPECT_NE(transfer_tag(1, 0, 0, 0), transfer_tag(2, 0, 0, 0));
  EXPECT_NE(transfer_tag(1, 1, 0, 0), transfer_tag(1, 0, 0, 0));
  EXPECT_NE(transfer_tag(1, 0, 1, 0), transfer_tag(1, 0, 0, 0));
  EXPECT_NE(transfer_tag(1, 0, 0, 1), transfer_tag(1, 0, 0, 0));
}

}  // namespace
}  // namespace troupe
