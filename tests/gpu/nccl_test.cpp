// NCCL bootstrapped over troupe's transport, on the GPUs this machine has: every rank of a
// one-host job joins the group through the UCX-broadcast unique id and runs all-reduce,
// reduce-scatter, all-gather and broadcast on device buffers, checked against the host
// arithmetic. With one GPU the group has one rank (NCCL cannot put two ranks on one GPU);
// it skips, saying why, where there is no usable GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include "tests/gpu/gpu_test_support.hpp"
#include "transport/nccl_group.hpp"

namespace troupe {
namespace {

using testing::DeviceArray;

std::unique_ptr<Transport> world_of_one(int port) {
  TransportOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.coordinator_port = static_cast<uint16_t>(port);
  auto t = Transport::make(o);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t ? std::move(*t) : nullptr;
}

TEST(Nccl, AGroupBootstrappedOverTheTransportRunsEveryCollective) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto transport = world_of_one(29731);
  ASSERT_NE(transport, nullptr);
  auto group = NcclGroup::create(*transport, 0, std::chrono::seconds(60));
  ASSERT_TRUE(group.ok()) << group.error().message;
  NcclGroup& g = **group;
  EXPECT_EQ(g.size(), 1);
  std::vector<float> values(1 << 20);
  std::iota(values.begin(), values.end(), 0.0f);
  DeviceArray<float> data(values), gathered(values.size());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(g.all_reduce(data.get(), values.size(), DataType::f32, ReduceOp::average, stream).ok());
  ASSERT_TRUE(
      g.reduce_scatter(data.get(), gathered.get(), values.size(), DataType::f32, ReduceOp::sum, stream).ok());
  ASSERT_TRUE(g.all_gather(gathered.get(), data.get(), values.size(), DataType::f32, stream).ok());
  ASSERT_TRUE(g.broadcast(data.get(), values.size(), DataType::f32, 0, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(data.download(), values) << "one rank: every collective is the identity";
  cudaStreamDestroy(stream);
  g.abort();
  EXPECT_FALSE(g.all_reduce(data.get(), 1, DataType::f32, ReduceOp::sum, nullptr).ok()) << "aborted";
}

}  // namespace
}  // namespace troupe
