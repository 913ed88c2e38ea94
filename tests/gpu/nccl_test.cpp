// NCCL bootstrapped over troupe's transport, on the GPUs this machine has: every rank of a
// one-host job joins the group through the UCX-broadcast unique id and runs all-reduce,
// reduce-scatter, all-gather and broadcast on device buffers, checked against the host
// arithmetic. With one GPU the group has one rank (NCCL cannot put two ranks on one GPU);
// it skips, saying why, where there is no usable GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include <caf/all.hpp>

#include "actors/device_comm.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tests/support/collective_calls.hpp"
#include "tests/support/free_port.hpp"
#include "transport/nccl_group.hpp"

namespace troupe {
namespace {

using testing::DeviceArray;

// Rank 0 of 1, its coordinator on a free port.
std::unique_ptr<Transport> world_of_one() {
  TransportOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.coordinator_port = static_cast<uint16_t>(testing::free_port());
  auto t = Transport::make(o);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t ? std::move(*t) : nullptr;
}

TEST(Nccl, AGroupBootstrappedOverTheTransportRunsEveryCollective) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto transport = world_of_one();
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
  // The all-gather alone must bring the values back: a collective that did nothing fails.
  ASSERT_EQ(cudaMemsetAsync(data.get(), 0, values.size() * sizeof(float), stream), cudaSuccess);
  ASSERT_TRUE(g.all_gather(gathered.get(), data.get(), values.size(), DataType::f32, stream).ok());
  ASSERT_TRUE(g.broadcast(data.get(), values.size(), DataType::f32, 0, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(data.download(), values) << "one rank: every collective is the identity";
  cudaStreamDestroy(stream);
  g.abort();
  EXPECT_FALSE(g.all_reduce(data.get(), 1, DataType::f32, ReduceOp::sum, nullptr).ok()) << "aborted";
}

// A group over a communicator the transport made (here of the one rank): its NCCL group
// bootstraps over that communicator, and the device comm actor runs a request naming it,
// and answers one naming a communicator it has no group for with an error.
TEST(Nccl, AGroupPerCommunicatorRunsTheRequestsThatNameIt) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto transport = world_of_one();
  ASSERT_NE(transport, nullptr);
  auto comm = transport->make_communicator({0});
  ASSERT_TRUE(comm.ok()) << comm.error().message;
  NcclGroups groups;
  for (CommunicatorId id : {world_communicator, *comm}) {
    auto group = NcclGroup::create(*transport, 0, std::chrono::seconds(60), id);
    ASSERT_TRUE(group.ok()) << group.error().message;
    groups.emplace(id, std::move(*group));
  }
  auto stream = CudaStream::make("comm", 0, CudaStream::Priority::high, nullptr,
                                 [](const std::string& what) { ADD_FAILURE() << what; });
  ASSERT_TRUE(stream.ok()) << stream.error().message;
  caf::actor_system_config config;
  caf::actor_system system{config};
  caf::actor actor = spawn_device_comm(system, caf::actor{}, std::move(groups), std::move(*stream));
  auto data = std::make_shared<DeviceArray<float>>(std::vector<float>(1024, 2.0f));
  caf::scoped_actor self{system};
  for (auto [tag, id] : {std::pair<uint64_t, CommunicatorId>{7, *comm}, {8, *comm + 1}}) {
    auto r =
        testing::device_request(tag, CollectiveKind::all_reduce, data->get(), data->get(), 1024, 0, data);
    r.comm = id;
    testing::send_device_request(self, actor, std::move(r));
    std::string error = "no answer";
    self->receive([&](collective_done& d) { error = d.error; },
                  caf::after(std::chrono::seconds(60)) >> [] {});
    if (id == *comm)
      EXPECT_EQ(error, "") << "the group of communicator " << id;
    else
      EXPECT_NE(error.find("no NCCL group for communicator"), std::string::npos) << error;
  }
  EXPECT_EQ(data->download(), std::vector<float>(1024, 2.0f)) << "one rank: the sum is the identity";
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

// The device comm actor issues a request on its comm stream after the producer's event and
// answers with collective_done once the GPU ran it, letting the buffer's owner go first.
TEST(Nccl, TheDeviceCommActorAnswersWhenTheGpuRanTheCollective) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto transport = world_of_one();
  ASSERT_NE(transport, nullptr);
  auto group = NcclGroup::create(*transport, 0, std::chrono::seconds(60));
  ASSERT_TRUE(group.ok()) << group.error().message;
  auto stream = CudaStream::make("comm", 0, CudaStream::Priority::high, nullptr,
                                 [](const std::string& what) { ADD_FAILURE() << what; });
  ASSERT_TRUE(stream.ok()) << stream.error().message;
  caf::actor_system_config config;
  caf::actor_system system{config};
  // No comm agent: every span here is in device memory.
  caf::actor comm = spawn_device_comm(system, caf::actor{}, std::move(*group), std::move(*stream));
  auto data = std::make_shared<DeviceArray<float>>(std::vector<float>(4096, 3.0f));
  std::weak_ptr<DeviceArray<float>> watch = data;
  // Produced by host work that already finished: the span's ready event is complete.
  auto r = testing::device_request(42, CollectiveKind::all_reduce, data->get(), data->get(), 4096, 0, data);
  data.reset();
  caf::scoped_actor self{system};
  testing::send_device_request(self, comm, std::move(r));
  int64_t tag = -1;
  bool released = false;
  self->receive(
      [&](collective_done& d) {
        tag = d.error.empty() ? static_cast<int64_t>(d.tag) : -2;
        released = watch.expired();
      },
      caf::after(std::chrono::seconds(60)) >> [] {});
  EXPECT_EQ(tag, 42);
  EXPECT_TRUE(released) << "the owner is let go before the requester hears";
  caf::anon_send_exit(comm, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace troupe
