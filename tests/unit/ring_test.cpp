// The arithmetic of ring collectives and the collective state machines, run over an
// in-process fake transport (the real one is tested across processes in integration/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/support/typed_values.hpp"
#include "transport/collective.hpp"
#include "transport/ring.hpp"

namespace troupe {
namespace {

using testing::decode;
using testing::encode;

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
  for (int round = 0; round < 10000000; ++round) {
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
  for (auto& [tag, left] : net.sends) EXPECT_TRUE(left.empty()) << "unmatched send, tag " << tag;
  for (auto& [tag, left] : net.recvs) EXPECT_TRUE(left.empty()) << "unmatched receive, tag " << tag;
}

CollectiveShape shape_of(int64_t rank, int64_t world, std::size_t chunk_bytes, std::size_t in_flight) {
  CollectiveShape s;
  s.id = 5;
  s.rank = rank;
  s.world_size = world;
  s.chunk_bytes = chunk_bytes;
  s.chunks_in_flight = in_flight;
  return s;
}

// Values small enough to be exact in bf16 and fp16 and in their sums over 4 ranks.
float value_of(int64_t rank, std::size_t i) {
  return static_cast<float>((rank * 5 + static_cast<int64_t>(i) * 3) % 16);
}

// Runs one collective on `world` in-process ranks; make(rank, io-shape, buffers) builds it.
struct Cluster {
  FakeNetwork net;
  std::vector<std::unique_ptr<FakeNetwork::Io>> ios;
  std::vector<std::unique_ptr<Collective>> ops;
};

class Collectives : public ::testing::TestWithParam<DataType> {};

TEST_P(Collectives, AllReduceMatchesANaiveSumForRandomSizes) {
  DataType type = GetParam();
  std::mt19937 rng(7);
  for (int64_t world : {1, 2, 3, 4}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::size_t count = trial < 2 ? static_cast<std::size_t>(trial)
                                    : std::uniform_int_distribution<std::size_t>(2, 300)(rng);
      Cluster c;
      std::vector<std::vector<uint8_t>> data(world);
      for (int64_t r = 0; r < world; ++r) {
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = value_of(r, i);
        data[r] = encode(v, type);
        c.ios.push_back(std::make_unique<FakeNetwork::Io>(c.net, r));
        c.ops.push_back(
            make_all_reduce(shape_of(r, world, 16, 3), data[r].data(), count, type, ReduceOp::sum));
      }
      run_to_completion(c.ops, c.net, c.ios);
      for (int64_t r = 0; r < world; ++r)
        for (std::size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int64_t q = 0; q < world; ++q) expected += value_of(q, i);
          ASSERT_EQ(decode(data[r], i, type), expected)
              << data_type_name(type) << " world " << world << " count " << count << " rank " << r
              << " element " << i;
        }
    }
  }
}

TEST_P(Collectives, RecursiveDoublingMatchesANaiveSumOnEveryWorldSize) {
  DataType type = GetParam();
  for (int64_t world = 1; world <= 8; ++world) {
    for (std::size_t count : {0u, 1u, 7u, 100u}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        Cluster c;
        std::vector<std::vector<uint8_t>> data(world);
        for (int64_t r = 0; r < world; ++r) {
          std::vector<float> v(count);
          for (std::size_t i = 0; i < count; ++i) v[i] = value_of(r, i);
          data[r] = encode(v, type);
          c.ios.push_back(std::make_unique<FakeNetwork::Io>(c.net, r));
          c.ops.push_back(make_all_reduce_small(shape_of(r, world, 16, 3), data[r].data(), count, type, op));
        }
        run_to_completion(c.ops, c.net, c.ios);
        for (int64_t r = 0; r < world; ++r) {
          EXPECT_EQ(data[r], data[0]) << "every rank holds the same bits, world " << world;
          for (std::size_t i = 0; i < count && op == ReduceOp::sum; ++i) {
            float expected = 0;
            for (int64_t q = 0; q < world; ++q) expected += value_of(q, i);
            ASSERT_EQ(decode(data[r], i, type), expected)
                << "world " << world << " rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterOutOfPlaceLeavesTheInputAndMatchesANaiveSum) {
  DataType type = GetParam();
  for (int64_t world : {1, 2, 3, 4}) {
    for (std::size_t count : {0u, 1u, 5u, 37u}) {
      Cluster c;
      std::vector<std::vector<uint8_t>> input(world), output(world), original(world);
      for (int64_t r = 0; r < world; ++r) {
        std::vector<float> v(count * world);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_of(r, i);
        input[r] = original[r] = encode(v, type);
        output[r].assign(count * element_bytes(type), 0xAB);
        c.ios.push_back(std::make_unique<FakeNetwork::Io>(c.net, r));
        c.ops.push_back(make_reduce_scatter(shape_of(r, world, 8, 2), input[r].data(), output[r].data(),
                                            count, type, ReduceOp::sum));
      }
      run_to_completion(c.ops, c.net, c.ios);
      for (int64_t r = 0; r < world; ++r) {
        EXPECT_EQ(input[r], original[r]) << "input changed on rank " << r;
        for (std::size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int64_t q = 0; q < world; ++q) expected += value_of(q, r * count + i);
          ASSERT_EQ(decode(output[r], i, type), expected)
              << "world " << world << " rank " << r << " element " << i;
        }
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterInPlaceAveragesIntoTheOwnBlock) {
  DataType type = GetParam();
  const int64_t world = 4;  // a power of two: the average of small integers stays exact
  const std::size_t count = 9;
  Cluster c;
  std::vector<std::vector<uint8_t>> data(world);
  for (int64_t r = 0; r < world; ++r) {
    std::vector<float> v(count * world);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_of(r, i);
    data[r] = encode(v, type);
    c.ios.push_back(std::make_unique<FakeNetwork::Io>(c.net, r));
    void* own = data[r].data() + r * count * element_bytes(type);
    c.ops.push_back(
        make_reduce_scatter(shape_of(r, world, 8, 4), data[r].data(), own, count, type, ReduceOp::average));
  }
  run_to_completion(c.ops, c.net, c.ios);
  for (int64_t r = 0; r < world; ++r)
    for (std::size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int64_t q = 0; q < world; ++q) expected += value_of(q, r * count + i);
      ASSERT_EQ(decode(data[r], r * count + i, type), expected / world) << "rank " << r << " element " << i;
    }
}

TEST_P(Collectives, AllGatherGivesEveryRankEveryBlock) {
  DataType type = GetParam();
  for (int64_t world : {1, 2, 3, 5}) {
    for (std::size_t count : {0u, 1u, 4u, 33u}) {
      Cluster c;
      std::vector<std::vector<uint8_t>> data(world);
      for (int64_t r = 0; r < world; ++r) {
        std::vector<float> v(count * world, 99.0f);
        for (std::size_t i = 0; i < count; ++i) v[r * count + i] = value_of(r, i);
        data[r] = encode(v, type);
        c.ios.push_back(std::make_unique<FakeNetwork::Io>(c.net, r));
        c.ops.push_back(make_all_gather(shape_of(r, world, 6, 2), data[r].data(), count, type));
      }
      run_to_completion(c.ops, c.net, c.ios);
      for (int64_t r = 0; r < world; ++r)
        for (int64_t q = 0; q < world; ++q)
          for (std::size_t i = 0; i < count; ++i)
            ASSERT_EQ(decode(data[r], q * count + i, type), value_of(q, i)) << "rank " << r << " block " << q;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Collectives, ::testing::Values(DataType::f32, DataType::bf16, DataType::f16),
                         [](const auto& info) { return std::string(data_type_name(info.param)); });

TEST(Collective, BroadcastOverFakeNetworkCopiesTheRootEverywhere) {
  for (int64_t world : {1, 2, 4}) {
    for (int64_t root = 0; root < world; ++root) {
      Cluster c;
      std::vector<std::vector<float>> data(world, std::vector<float>(33));
      for (int64_t r = 0; r < world; ++r) {
        std::iota(data[r].begin(), data[r].end(), static_cast<float>(r * 1000));
        c.ios.push_back(std::make_unique<FakeNetwork::Io>(c.net, r));
        c.ops.push_back(make_broadcast(shape_of(r, world, 8, 2), data[r].data(), 33 * sizeof(float), root));
      }
      run_to_completion(c.ops, c.net, c.ios);
      for (int64_t r = 0; r < world; ++r) EXPECT_EQ(data[r], data[root]);
    }
  }
}

TEST(Collective, TagsOfDifferentOperationsChunksStepsSendersAndCallsDiffer) {
  CollectiveShape a = shape_of(0, 4, 16, 2), b = a;
  uint64_t base = transfer_tag(a, 0, 0, 0);
  b.id = 6;
  EXPECT_NE(transfer_tag(b, 0, 0, 0), base);
  EXPECT_NE(transfer_tag(a, 1, 0, 0), base);
  EXPECT_NE(transfer_tag(a, 0, 1, 0), base);
  EXPECT_NE(transfer_tag(a, 0, 0, 1), base);
  b = a;
  b.communicator = 1;
  EXPECT_NE(transfer_tag(b, 0, 0, 0), base);
  b = a;
  b.descriptor = 3;
  EXPECT_NE(transfer_tag(b, 0, 0, 0), base);
  EXPECT_EQ(transfer_tag(b, 0, 0, 0) & ~tag_bits::descriptor_mask, base & ~tag_bits::descriptor_mask);
  EXPECT_NE(point_to_point_tag(0, 0), base);
  EXPECT_NE(point_to_point_tag(1, 0), point_to_point_tag(0, 0));
}

TEST(Collective, CallsOfAnotherKindSizeOrTypeHaveAnotherDescriptor) {
  auto d = describe_call("all_reduce", DataType::f32, 100, 0, ReduceOp::sum);
  EXPECT_NE(describe_call("broadcast", DataType::f32, 100, 0, ReduceOp::sum), d);
  EXPECT_NE(describe_call("all_reduce", DataType::bf16, 100, 0, ReduceOp::sum), d);
  EXPECT_NE(describe_call("all_reduce", DataType::f32, 101, 0, ReduceOp::sum), d);
  EXPECT_NE(describe_call("all_reduce", DataType::f32, 100, 0, ReduceOp::average), d);
}

}  // namespace
}  // namespace troupe
