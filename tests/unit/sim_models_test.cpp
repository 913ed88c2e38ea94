// The simulator's pieces on their own: the virtual clock, the shared processors, the link
// model, the device and cluster files and the cost model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/config/load.hpp"
#include "runtime/config/resolve.hpp"
#include "runtime/model/model_flops.hpp"
#include "sim/cluster.hpp"
#include "sim/cost_model.hpp"
#include "sim/link_model.hpp"
#include "sim/measured_compute.hpp"
#include "sim/processors.hpp"
#include "sim/trace_hops.hpp"
#include "sim/trace_passes.hpp"
#include "sim/virtual_clock.hpp"
#include "tests/support/temp_dir.hpp"

namespace troupe::sim {
namespace {

TEST(VirtualClock, FiresEarliestFirstAndTiesInSchedulingOrder) {
  VirtualClock clock;
  std::vector<std::string> fired;
  clock.at(30, [&] { fired.push_back("c@30"); });
  clock.at(10, [&] { fired.push_back("a@10"); });
  clock.at(10, [&] { fired.push_back("b@10"); });
  clock.at(20, [&] {
    fired.push_back("x@20");
    clock.after(0, [&] { fired.push_back("y@20"); });  // same instant, after those already there
    clock.at(5, [&] { fired.push_back("late@20"); });  // the past means now
  });
  while (clock.advance()) {
  }
  EXPECT_EQ(fired, (std::vector<std::string>{"a@10", "b@10", "x@20", "y@20", "late@20", "c@30"}));
  EXPECT_EQ(clock.now(), 30);
  EXPECT_EQ(clock.fired(), 6);
  EXPECT_TRUE(clock.idle());
}

TEST(SharedProcessors, ShareCapacityAndSpeedUpWhenOthersEnd) {
  VirtualClock clock;
  SharedProcessors one_core(clock, 1);
  std::vector<Nanos> ends;
  one_core.start(100, [&] { ends.push_back(clock.now()); });
  one_core.start(300, [&] { ends.push_back(clock.now()); });
  while (clock.advance()) {
  }
  // Both at half speed until the first ends at 200 (100 of work); the second's last 200 at full speed.
  EXPECT_EQ(ends, (std::vector<Nanos>{200, 400}));
}

TEST(SharedProcessors, LighterWorkTakesItsShareOfTheCapacity) {
  VirtualClock clock;
  SharedProcessors two_computes(clock, 2);  // e.g. 2 cores, computes of 1 thread
  std::vector<Nanos> ends;
  two_computes.start(300, [&] { ends.push_back(clock.now()); });
  two_computes.start(300, [&] { ends.push_back(clock.now()); });
  two_computes.start(
      60, [&] { ends.push_back(clock.now()); }, 1);  // a collective's thread
  while (clock.advance()) {
  }
  // Demand 3 on capacity 2: all at 2/3 speed until the collective ends at 90 (60 of work),
  // then the computes' last 240 at full speed.
  EXPECT_EQ(ends, (std::vector<Nanos>{90, 330, 330}));
  SharedProcessors quarter(clock, 1);
  ends.clear();
  const Nanos t0 = clock.now();
  quarter.start(100, [&] { ends.push_back(clock.now() - t0); });
  quarter.start(
      100, [&] { ends.push_back(clock.now() - t0); }, 0.25);
  while (clock.advance()) {
  }
  // Demand 1.25 on 1: both at 0.8 until the second ends at 125; the first's last 0 then.
  EXPECT_EQ(ends, (std::vector<Nanos>{125, 125}));
}

TEST(SharedProcessors, WithoutALimitEachTakesItsCost) {
  VirtualClock clock;
  SharedProcessors devices(clock, 0);
  std::vector<Nanos> ends;
  for (Nanos cost : {100, 300, 50}) devices.start(cost, [&] { ends.push_back(clock.now()); });
  while (clock.advance()) {
  }
  EXPECT_EQ(ends, (std::vector<Nanos>{50, 100, 300}));
}

ClusterSpec two_hosts_of_four() {
  ClusterSpec c;
  c.hosts = 2;
  c.ranks_per_host = 4;
  c.host = LinkSpec{100e9, 1e-6, {}, {}, 0, {}, {}};
  c.network = LinkSpec{10e9, 5e-6, {}, {}, 0, {}, {}};
  c.rails = 4;
  return c;
}

TEST(LinkModel, MessagesTakeTheHostLinkOrARail) {
  LinkModel links(two_hosts_of_four());
  EXPECT_EQ(links.point_to_point(100'000'000, 0, 3), seconds_to_nanos(1e-6 + 1e-3));
  EXPECT_EQ(links.point_to_point(100'000'000, 3, 4), seconds_to_nanos(5e-6 + 1e-2));
}

TEST(LinkModel, RingsInsideAHostAndHierarchicallyAcross) {
  LinkModel links(two_hosts_of_four());
  const int64_t bytes = 400'000'000;
  // Four ranks of one host: each pass 3 hops of a quarter.
  EXPECT_EQ(links.reduce_scatter(bytes, {0, 1, 2, 3}), seconds_to_nanos(3e-6 + 0.75 * bytes / 100e9));
  EXPECT_NEAR(links.all_reduce(bytes, {0, 1, 2, 3}), 2 * links.reduce_scatter(bytes, {0, 1, 2, 3}), 1);
  // One rank per host: the network ring.
  EXPECT_EQ(links.reduce_scatter(bytes, {0, 4}), seconds_to_nanos(5e-6 + 0.5 * bytes / 10e9));
  // Both hosts, four each: inside first, then a quarter of the buffer across, rails side by side.
  const double inside = 3e-6 + 0.75 * bytes / 100e9, across = 5e-6 + 0.5 * (bytes / 4.0) / 10e9;
  EXPECT_EQ(links.reduce_scatter(bytes, {0, 1, 2, 3, 4, 5, 6, 7}), seconds_to_nanos(inside + across));
  EXPECT_EQ(links.all_gather(bytes, {5}), 0);
}

TEST(LinkModel, AHostsMeasuredCollectivesTakeTheirBusBandwidth) {
  ClusterSpec c = two_hosts_of_four();
  c.host.collective_busbw = {{"all_reduce", 1e9}, {"all_gather", 4e9}};
  LinkModel links(c);
  const int64_t bytes = 100'000'000;
  EXPECT_EQ(links.all_reduce(bytes, {0, 1}), seconds_to_nanos(1e-6 + 2 * 0.5 * bytes / 1e9));
  EXPECT_EQ(links.all_gather(bytes, {0, 1, 2, 3}), seconds_to_nanos(3e-6 + 0.75 * bytes / 4e9));
  EXPECT_EQ(links.reduce_scatter(bytes, {0, 1}),
            seconds_to_nanos(1e-6 + 0.5 * bytes / 100e9));  // not measured
}

TEST(LinkModel, ACrowdedHostsCollectivesTakeTheFigureOfTheirRankCountAtFullSpeed) {
  ClusterSpec c = two_hosts_of_four();
  c.host.collective_busbw = {{"all_gather", 4e9}};
  c.host.collective_busbw_by_ranks = {{4, {{"all_gather", 0.5e9}}}};
  c.host.cores = 2;
  LinkModel links(c);
  const int64_t bytes = 100'000'000;
  // Four ranks on two cores ran at half a core each: the host's sharing is simulated apart,
  // so the figure is taken at 0.5 × 4 / 2 = 1 GB/s. The host's four ranks crowd its two
  // cores, so a pair of them takes that figure too.
  EXPECT_EQ(links.all_gather(bytes, {0, 1, 2, 3}), seconds_to_nanos(3e-6 + 0.75 * bytes / 1e9));
  EXPECT_EQ(links.all_gather(bytes, {0, 1}), seconds_to_nanos(1e-6 + 0.5 * bytes / 1e9));
  // Four cores, the figure at 8 ranks (at 0.5 × 8 / 4 = 1 GB/s): four ranks fit, a pair
  // takes the two-rank figure and four the cost of a byte a third of the way from 2 to 8
  // ranks, 1 / (0.25 + (1 - 0.25) / 3) = 2 GB/s.
  c.host.cores = 4;
  c.host.collective_busbw_by_ranks = {{8, {{"all_gather", 0.5e9}}}};
  LinkModel roomy(c);
  EXPECT_EQ(roomy.all_gather(bytes, {0, 1}), seconds_to_nanos(1e-6 + 0.5 * bytes / 4e9));
  EXPECT_NEAR(roomy.all_gather(bytes, {0, 1, 2, 3}), seconds_to_nanos(3e-6 + 0.75 * bytes / 2e9), 2);
}

TEST(LinkModel, BesideComputesAPairTakesTheFigureMeasuredSoAtFullSpeed) {
  ClusterSpec c = two_hosts_of_four();
  c.ranks_per_host = 2;
  c.host.cores = 2;
  c.host.collective_busbw = {{"reduce_scatter", 4e9}, {"all_gather", 4e9}};
  c.host.collective_busbw_beside_compute = {{"reduce_scatter", 0.5e9}};
  LinkModel links(c);
  const int64_t bytes = 100'000'000;
  // Measured with a progress thread and a busy one per rank, four on two cores: half a core
  // each, which the simulated host applies itself, so the figure is taken at 1 GB/s.
  EXPECT_EQ(links.reduce_scatter(bytes, {0, 1}, true), seconds_to_nanos(1e-6 + 0.5 * bytes / 1e9));
  EXPECT_EQ(links.reduce_scatter(bytes, {0, 1}), seconds_to_nanos(1e-6 + 0.5 * bytes / 4e9));  // idle
  EXPECT_EQ(links.all_gather(bytes, {0, 1}, true),
            seconds_to_nanos(1e-6 + 0.5 * bytes / 4e9));  // none measured beside computes
  // Four cores hold the four threads: the figure as measured.
  c.host.cores = 4;
  EXPECT_EQ(LinkModel(c).reduce_scatter(bytes, {0, 1}, true), seconds_to_nanos(1e-6 + 0.5 * bytes / 0.5e9));
  // A crowded host's collectives keep their rank count's figure, measured among computes' peers.
  c.host.cores = 2;
  c.ranks_per_host = 4;
  c.host.collective_busbw_by_ranks = {{4, {{"reduce_scatter", 0.25e9}}}};
  EXPECT_EQ(LinkModel(c).reduce_scatter(bytes, {0, 1}, true), seconds_to_nanos(1e-6 + 0.5 * bytes / 0.5e9));
}

TEST(LinkModel, AHostsTensorsTakeTheHopMeasuredWithItsRankCount) {
  ClusterSpec c = two_hosts_of_four();
  c.host.hop_latency_by_ranks = {{2, 1e-3}, {8, 3e-3}};
  LinkModel links(c);  // four ranks a host: the figure of the nearest count above
  EXPECT_EQ(links.point_to_point(100'000'000, 0, 3), seconds_to_nanos(3e-3 + 1e-3));
  EXPECT_EQ(links.point_to_point(100'000'000, 3, 4),
            seconds_to_nanos(5e-6 + 1e-2));  // across hosts: the rail's
  c.ranks_per_host = 2;
  EXPECT_EQ(LinkModel(c).point_to_point(100'000'000, 0, 1), seconds_to_nanos(1e-3 + 1e-3));
  c.ranks_per_host = 16;  // more than measured: the most measured
  EXPECT_EQ(LinkModel(c).point_to_point(100'000'000, 0, 1), seconds_to_nanos(3e-3 + 1e-3));
  c.host.hop_latency_by_ranks.clear();  // none measured: the link's latency
  EXPECT_EQ(LinkModel(c).point_to_point(100'000'000, 0, 1), seconds_to_nanos(1e-6 + 1e-3));
}

std::string written(const std::string& text) {
  const std::string path = testing::make_temp_dir() + "/device.json";
  std::ofstream(path) << text;
  return path;
}

TEST(DeviceFile, KeepsTheFiguresMeasuredByRankCountAndNamesABadKey) {
  DeviceSpec d;
  d.name = "vm";
  d.kind = "cpu";
  d.gemm_flops = {{"fp32", 1e11}};
  d.memory_bandwidth = 1e10;
  d.memory_bytes = 1 << 30;
  d.transport_hop_latency_by_ranks = {{2, 2e-4}, {4, 2e-3}};
  d.collective_busbw_by_ranks = {{4, {{"all_gather", 4e8}}}};
  d.collective_busbw_beside_compute = {{"reduce_scatter", 1e8}};
  const std::string path = written(device_json(d));
  auto read = load_device_file(path);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read->transport_hop_latency_by_ranks, d.transport_hop_latency_by_ranks);
  EXPECT_EQ(read->collective_busbw_by_ranks, d.collective_busbw_by_ranks);
  EXPECT_EQ(read->collective_busbw_beside_compute, d.collective_busbw_beside_compute);
  for (const char* bad : {R"("1": 0.001)", R"("four": 0.001)", R"("4x": 0.001)"}) {
    std::string text = device_json(d);
    text.replace(text.find(R"("2":0.0002)"), std::string(R"("2":0.0002)").size(), bad);
    const std::string bad_path = written(text);
    auto refused = load_device_file(bad_path);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find(bad_path + ": transport_hop_latency_by_ranks has the key"),
              std::string::npos)
        << refused.error().message;
  }
}

TEST(LinkModel, SmallBuffersTakeATree) {
  ClusterSpec c = two_hosts_of_four();
  c.hosts = 64;
  LinkModel links(c);
  std::vector<int64_t> all;
  for (int64_t r = 0; r < 64; r += 4) all.push_back(r);  // 16 hosts, one each
  // 16 bytes over 16 members: log2(16) = 4 hops beat the ring's 15.
  EXPECT_EQ(links.all_gather(16, all), seconds_to_nanos(4 * (5e-6 + 16 / 10e9)));
}

TEST(ClusterFile, ReadsHostsLinksAndFaults) {
  auto c = parse_cluster(R"(
[cluster]
hosts = 2
ranks_per_host = 8
device = "h200-sxm"
efficiency = 0.5
seed = 7
[links.host]
bandwidth_gbs = 450
latency_us = 3
[links.network]
rails = 8
bandwidth_gbs = 50
latency_us = 5
[[faults]]
kind = "dead_rank"
rank = 9
at_ms = 20
[[faults]]
kind = "random_slow"
count = 3
factor = 2
)",
                         "c.toml", ".");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->world(), 16);
  EXPECT_EQ(c->device.name, "h200-sxm");
  EXPECT_DOUBLE_EQ(c->host.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(c->network.latency_s, 5e-6);
  ASSERT_EQ(c->faults.size(), 4u);
  EXPECT_EQ(c->faults[0].kind, FaultKind::dead_rank);
  EXPECT_DOUBLE_EQ(c->faults[0].at_s, 0.02);
  EXPECT_EQ(c->faults[0].origin, "c.toml:15:1");  // its [[faults]] line
  // The seed picks the slow ranks, the same ones every time.
  auto again = parse_cluster(
      "[cluster]\nhosts = 2\nranks_per_host = 8\ndevice = \"h200-sxm\"\nseed = 7\n"
      "[links.host]\nbandwidth_gbs = 1\n[links.network]\nbandwidth_gbs = 1\n"
      "[[faults]]\nkind = \"random_slow\"\ncount = 3\nfactor = 2\n",
      "d.toml", ".");
  ASSERT_TRUE(again);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(again->faults[i].rank, c->faults[i + 1].rank);
}

TEST(ClusterFile, BadInputNamesTheLineAndTheKey) {
  auto unknown = parse_cluster("[cluster]\nhosts = 2\nrank_per_host = 8\n", "c.toml", ".");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("c.toml:3:17: [cluster] has no key \"rank_per_host\" (did you mean "
                                         "\"ranks_per_host\"?)"),
            std::string::npos)
      << unknown.error().message;
  auto device = parse_cluster("[cluster]\ndevice = \"h300\"\n", "c.toml", ".");
  ASSERT_FALSE(device);
  EXPECT_NE(device.error().message.find("\"h300\" is neither a preset (h100-sxm, h200-sxm) nor a file"),
            std::string::npos)
      << device.error().message;
  auto range = parse_cluster("[cluster]\nhosts = 0\ndevice = \"h100-sxm\"\n", "c.toml", ".");
  ASSERT_FALSE(range);
  EXPECT_NE(
      range.error().message.find("c.toml:2:9: [cluster] hosts = 0 (an integer); allowed: an integer from 1"),
      std::string::npos)
      << range.error().message;
  auto fault = parse_cluster(
      "[cluster]\ndevice = \"h100-sxm\"\nranks_per_host = 2\n[links.host]\nbandwidth_gbs = 1\n"
      "[[faults]]\nkind = \"dead_rank\"\nrank = 2\n",
      "c.toml", ".");
  ASSERT_FALSE(fault);
  EXPECT_NE(fault.error().message.find("c.toml:8:8: [faults] rank = 2"), std::string::npos)
      << fault.error().message;
  auto link = parse_cluster("[cluster]\ndevice = \"h100-sxm\"\n", "c.toml", ".");
  ASSERT_FALSE(link);
  EXPECT_NE(link.error().message.find("bandwidth_gbs is not set"), std::string::npos) << link.error().message;
}

JobConfig job_of(const std::string& text) {
  auto job = load_config_string(text, "job.toml", {});
  EXPECT_TRUE(job) << (job ? "" : job.error().message);
  return job ? *job : JobConfig{};
}

ClusterSpec h100_host(int64_t ranks) {
  ClusterSpec c;
  c.ranks_per_host = ranks;
  c.device = *device_preset("h100-sxm");
  c.efficiency = 0.5;
  c.host = LinkSpec{450e9, 3e-6, {}, {}, 0, {}, {}};
  c.network = c.host;
  return c;
}

TEST(CostModel, LayerTimesAreTheirFlopsOverTheAchievedRate) {
  JobConfig job = job_of(
      "[cluster]\nworld_size = 1\n[precision]\ndtype = \"bf16\"\n[model]\nseq_len = 128\n"
      "d_model = 256\nn_layers = 2\nn_heads = 4\n[batch]\nmicro_batch_size = 4\n");
  auto costs = flops_layer_costs(job, h100_host(1));
  ASSERT_TRUE(costs) << costs.error().message;
  const auto flops = model_layer_flops(job.model, 4, 128);
  ASSERT_EQ(costs->size(), flops.size());
  EXPECT_DOUBLE_EQ((*costs)[1].forward_s, flops[1].forward / (989e12 * 0.5));
  EXPECT_DOUBLE_EQ((*costs)[1].backward_s, flops[1].backward / (989e12 * 0.5));
  EXPECT_GT((*costs)[0].forward_s, 0);  // the embedding's lookup: its bytes over the bandwidth
}

TEST(CostModel, ZeroStagesChooseTheirCollectivesAndTensorParallelismAddsItsOwn) {
  const std::string model =
      "[model]\nseq_len = 128\nd_model = 256\nn_layers = 4\nn_heads = 4\n"
      "[batch]\nmicro_batch_size = 4\ngradient_accumulation_steps = 2\n";
  JobConfig zero1 = job_of("[cluster]\nworld_size = 4\n[parallel]\ndp = 4\n[zero]\nstage = 1\n" + model);
  auto layers = flops_layer_costs(zero1, h100_host(4));
  ASSERT_TRUE(layers);
  auto c1 = job_costs(zero1, h100_host(4), *layers);
  ASSERT_TRUE(c1) << c1.error().message;
  ASSERT_EQ(c1->stages.size(), 1u);
  EXPECT_TRUE(c1->stages[0].scatter);
  EXPECT_EQ(c1->stages[0].reduce_bytes, 4 * c1->stages[0].parameters);
  EXPECT_EQ(c1->stages[0].gather_bytes, 4 * c1->stages[0].parameters);
  EXPECT_EQ(c1->chunks[0].exposed_forward, 0);

  JobConfig tp = job_of("[cluster]\nworld_size = 4\n[parallel]\ntp = 2\ndp = 2\n" + model);
  auto tp_layers = flops_layer_costs(tp, h100_host(4));
  ASSERT_TRUE(tp_layers);
  auto c2 = job_costs(tp, h100_host(4), *tp_layers);
  ASSERT_TRUE(c2) << c2.error().message;
  // Two all-reduces of the hidden state per block each way and one for the embedding.
  const int64_t hidden = 4 * 128 * 256 * 4;
  EXPECT_EQ(c2->chunks[0].exposed_forward, 9 * LinkModel(h100_host(4)).all_reduce(hidden, {0, 1}));
  EXPECT_FALSE(c2->stages[0].scatter);

  auto mismatch = job_costs(zero1, h100_host(8), *layers);
  ASSERT_FALSE(mismatch);
  EXPECT_NE(
      mismatch.error().message.find("has 8 ranks (1 hosts of 8) but job.toml runs dp 4 x pp 1 x tp 1 = 4"),
      std::string::npos)
      << mismatch.error().message;
}

TEST(CostModel, MeasuredBackwardHalvesAndACpuHostsCollectives) {
  JobConfig job = job_of(
      "[cluster]\nworld_size = 2\n[parallel]\ndp = 2\n[train]\nthreads = 1\n[model]\nseq_len = 16\n"
      "d_model = 32\nn_layers = 1\nn_heads = 2\n[batch]\nmicro_batch_size = 2\n");
  ClusterSpec cpu = h100_host(2);
  cpu.device.kind = "cpu";
  cpu.device.cores = 2;
  cpu.device.optimizer_elements_per_s = 1e9;  // measured with both cores' threads
  cpu.device.compute_threads = 2;
  // Embedding, one block, head: the block's backward measured whole and in halves that
  // cost more than it together; the others' halves not measured (half each).
  const std::vector<LayerCost> layers{{1e-3, 2e-3, 0, 0}, {4e-3, 8e-3, 6e-3, 3e-3}, {1e-3, 2e-3, 0, 0}};
  auto costs = job_costs(job, cpu, layers);
  ASSERT_TRUE(costs) << costs.error().message;
  const ChunkCost& c = costs->chunks[0];
  EXPECT_EQ(c.backward, seconds_to_nanos(12e-3));
  EXPECT_EQ(c.backward_input, seconds_to_nanos(1e-3 + 6e-3 + 1e-3));
  EXPECT_EQ(c.backward_weight, seconds_to_nanos(1e-3 + 3e-3 + 1e-3));
  // A CPU host of 2 cores and ranks of one thread: two computes at once, and a collective's
  // progress thread takes as much of the cores as one of them.
  EXPECT_DOUBLE_EQ(costs->host_capacity, 2);
  EXPECT_DOUBLE_EQ(costs->collective_demand, 1);
  // A rank of one thread updates at half the rate measured with two.
  const StageCost& stage = costs->stages[0];
  EXPECT_EQ(stage.optimizer, seconds_to_nanos(static_cast<double>(stage.parameters) / 0.5e9));
  auto gpu = job_costs(job, h100_host(2), layers);
  ASSERT_TRUE(gpu);
  EXPECT_DOUBLE_EQ(gpu->collective_demand, 0) << "a GPU's collectives leave its compute alone";
}

// compute = "measured": 4 one-thread processes on 2 cores each took twice a rank's
// full-speed time and more; the simulated host shares its cores out again, so the costs
// must come back at full speed, averaged over the processes.
TEST(MeasuredCompute, LayerCostsAreAveragedAndBroughtBackToFullSpeed) {
  EXPECT_DOUBLE_EQ(oversubscription(4, 1, 2), 2.0);
  EXPECT_DOUBLE_EQ(oversubscription(1, 4, 2), 2.0);
  EXPECT_DOUBLE_EQ(oversubscription(2, 1, 2), 1.0);
  EXPECT_DOUBLE_EQ(oversubscription(2, 1, 4), 1.0);
  const auto profile = [](double forward_ms, double backward_ms) {
    return nlohmann::json{{"layers",
                           {{{"forward_ms", forward_ms}, {"backward_ms", backward_ms}},
                            {{"forward_ms", 1.0},
                             {"backward_ms", 2.0},
                             {"backward_input_ms", 1.2},
                             {"backward_weight_ms", 1.4}}}}};
  };
  auto costs = full_speed_layer_costs({profile(400, 800), profile(440, 880)}, 2.0);
  ASSERT_TRUE(costs) << costs.error().message;
  ASSERT_EQ(costs->size(), 2u);
  EXPECT_NEAR((*costs)[0].forward_s, 0.210, 1e-12);
  EXPECT_NEAR((*costs)[0].backward_s, 0.420, 1e-12);
  EXPECT_NEAR((*costs)[1].backward_input_s, 0.0006, 1e-12);
  EXPECT_NEAR((*costs)[1].backward_weight_s, 0.0007, 1e-12);
  EXPECT_DOUBLE_EQ((*costs)[0].backward_input_s, 0.0);
  auto fitting = full_speed_layer_costs({profile(400, 800)}, 1.0);
  ASSERT_TRUE(fitting);
  EXPECT_NEAR((*fitting)[0].forward_s, 0.400, 1e-12);

  nlohmann::json short_profile = profile(400, 800);
  short_profile["layers"].erase(1);
  auto mismatched = full_speed_layer_costs({profile(400, 800), short_profile}, 1.0);
  ASSERT_FALSE(mismatched);
  EXPECT_NE(mismatched.error().message.find("2 layers, another 1"), std::string::npos)
      << mismatched.error().message;
  EXPECT_FALSE(full_speed_layer_costs({}, 1.0));
}

// Two processes side by side, one slowed throughout: its ratios sit above 1 and the other's
// below, over the processes' common median, rather than each around its own.
TEST(MeasuredCompute, PassNoiseIsOverTheProcessesCommonMedian) {
  const auto passes = [](std::vector<std::pair<double, double>> times) {
    nlohmann::json list = nlohmann::json::array();
    for (auto [forward, backward] : times)
      list.push_back({{"forward_ms", forward}, {"backward_ms", backward}});
    return nlohmann::json{{"layers", nlohmann::json::array()}, {"passes", list}};
  };
  const auto noise = pass_noise({passes({{100, 200}, {90, 210}, {110, 190}}),     // medians 100, 200
                                 passes({{120, 240}, {130, 250}, {110, 230}})});  // medians 120, 240
  ASSERT_EQ(noise.size(), 2u);
  ASSERT_EQ(noise[0].size(), 6u);  // forward, backward, forward, ...
  EXPECT_NEAR(noise[0][0], 100.0 / 110, 1e-12);
  EXPECT_NEAR(noise[0][1], 200.0 / 220, 1e-12);
  EXPECT_NEAR(noise[1][0], 120.0 / 110, 1e-12);
  EXPECT_NEAR(noise[1][3], 250.0 / 220, 1e-12);
  EXPECT_NEAR(noise[1][4], 110.0 / 110, 1e-12);

  EXPECT_TRUE(
      pass_noise({passes({{100, 200}}), nlohmann::json{{"layers", nlohmann::json::array()}}}).empty());
}

// Two replicas of a two-stage pipeline: rank 0 waits from 20 to 35 ms for the gradient
// rank 1 made by 30 (a 5 ms hop), rank 1 from 40 to 50 for the activation rank 0 made by
// 48 (2 ms); rank 2's wait holds only another replica's compute end, and what is not a
// compute span of the compute thread (autograd's nested span, an unnamed forward on
// another thread) is none.
TEST(TraceHops, AStagesWaitsFromItsNeighboursComputeEnd) {
  nlohmann::json events = nlohmann::json::array();
  const auto span = [&](int64_t rank, const char* name, double from_ms, double to_ms, int64_t tid = 7) {
    events.push_back({{"ph", "X"},
                      {"pid", rank},
                      {"tid", tid},
                      {"name", name},
                      {"ts", from_ms * 1e3},
                      {"dur", (to_ms - from_ms) * 1e3}});
  };
  span(0, "forward 0.0.0", 0, 10);
  span(0, "forward 0.1.0", 10, 20);
  span(0, "backward 0.0.0", 35, 45);
  span(0, "autograd backward", 36, 44);
  span(0, "forward 0.2.0", 45, 48);
  span(1, "forward 0.0.0", 12, 20);
  span(1, "backward 0.0.0", 20, 30);
  span(1, "forward 0.1.0", 33, 40);
  span(1, "forward 0.2.0", 50, 55);
  span(1, "forward", 41, 42, 3);
  span(2, "forward 0.0.0", 0, 10);
  span(2, "forward 0.1.0", 25, 30);
  span(3, "forward 0.0.0", 50, 60);
  const std::vector<double> hops = critical_hops_ms(nlohmann::json{{"traceEvents", events}}, 2);
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_NEAR(hops[0], 5.0, 1e-9);
  EXPECT_NEAR(hops[1], 2.0, 1e-9);
  EXPECT_TRUE(critical_hops_ms(nlohmann::json{{"traceEvents", nlohmann::json::array()}}, 2).empty());
}

// A complete span of `rank`'s thread 1, as a merged trace holds it.
nlohmann::json span_event(int64_t rank, const std::string& name, double from_ms, double to_ms) {
  return {{"ph", "X"},    {"pid", rank},         {"tid", 1},
          {"name", name}, {"ts", from_ms * 1e3}, {"dur", (to_ms - from_ms) * 1e3}};
}

// Three stages: stage 0 waits from 10 to 30 ms. Stage 2's compute ended at 25 (the last
// stage's chunk feeding stage 0's next one in interleaved 1F1B: a 5 ms hop), stage 1's at
// 12 (not the one it waited for). Without wrapping only stage 1 is a neighbour of stage 0.
TEST(TraceHops, InterleavedStagesWrapAround) {
  nlohmann::json events = nlohmann::json::array();
  const auto span = [&](int64_t rank, double from_ms, double to_ms) {
    events.push_back(span_event(rank, "forward 0.0.0", from_ms, to_ms));
  };
  span(0, 0, 10);
  span(0, 30, 40);
  span(1, 2, 12);
  span(2, 15, 25);
  const nlohmann::json trace{{"traceEvents", events}};
  const std::vector<double> wrapped = critical_hops_ms(trace, 3, true);
  ASSERT_EQ(wrapped.size(), 1u);
  EXPECT_NEAR(wrapped[0], 5.0, 1e-9);
  const std::vector<double> plain = critical_hops_ms(trace, 3);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_NEAR(plain[0], 18.0, 1e-9);
}

// A split backward's halves are compute too: a stage that waited before its input half
// waited on the weight half its neighbour ran last.
TEST(TraceHops, SplitBackwardsCountAsCompute) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back(span_event(0, "forward 0.0.0", 0, 10));
  events.push_back(span_event(0, "backward_input 0.0.0", 20, 30));
  events.push_back(span_event(1, "backward_weight 0.0.0", 10, 18));
  const std::vector<double> hops = critical_hops_ms(nlohmann::json{{"traceEvents", events}}, 2);
  ASSERT_EQ(hops.size(), 1u);
  EXPECT_NEAR(hops[0], 2.0, 1e-9);
}

// The passes' medians from the steps asked for, and the plan at those costs: 1F1B idles
// (p − 1)(F + B) of m + p − 1 rounds whatever F and B cost; ZB-H1's order at a forward of
// 1 and halves of 1 idles its formula's (p − 1)/(3m + p − 1).
TEST(TracePasses, MediansOfTheKeptStepsAndThePlanAtThem) {
  nlohmann::json events = nlohmann::json::array();
  const auto span = [&](const std::string& name, double ms) { events.push_back(span_event(0, name, 0, ms)); };
  span("forward 0.0.0", 100);  // step 0: left out
  span("forward 1.0.0", 10);
  span("forward 1.1.0", 12);
  span("forward 2.0.1", 14);
  span("backward 1.0.0", 20);
  span("backward_input 1.0.0", 6);
  span("backward_weight 1.0.0", 4);
  span("wait activation 1.0.0", 50);
  const PassCosts costs = pass_costs(nlohmann::json{{"traceEvents", events}}, 1);
  EXPECT_EQ(costs.passes, 6);
  EXPECT_DOUBLE_EQ(costs.forward_ms, 12);
  EXPECT_DOUBLE_EQ(costs.backward_ms, 20);
  EXPECT_DOUBLE_EQ(costs.input_ms, 6);
  EXPECT_DOUBLE_EQ(costs.weight_ms, 4);

  PassCosts whole;
  whole.forward_ms = 10;
  whole.backward_ms = 30;
  auto one = planned_bubble("1f1b", {2, 8, 1}, whole);
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_NEAR(*one, 1.0 / 9.0, 1e-12);
  PassCosts unit;
  unit.forward_ms = unit.input_ms = unit.weight_ms = 1;
  auto h1 = planned_bubble("zb_h1", {2, 8, 1}, unit);
  ASSERT_TRUE(h1.ok());
  EXPECT_NEAR(*h1, 1.0 / 25.0, 1e-12);
  EXPECT_FALSE(planned_bubble("zigzag", {2, 8, 1}, unit).ok());
}

// The default cut balances the GPT's FLOPs: the embedding weighs nothing and the head little,
// so four chunks of a 4-block GPT hold a block each (the embedding with the first, the head
// with the last), where equal layer counts gave 2, 2, 1, 1 of its 6 layers.
TEST(Partition, FlopsGiveEachChunkOneBlockOfFour) {
  const std::string text =
      "[cluster]\nworld_size = 2\n[parallel]\npp = 2\n[pipeline]\nschedule = \"zbv\"\n"
      "[batch]\nmicro_batch_size = 8\ngradient_accumulation_steps = 8\n"
      "[model]\nseq_len = 128\nd_model = 256\nn_layers = 4\nn_heads = 4\n";
  JobConfig job = job_of(text);
  EXPECT_EQ(job.pipeline.partition.method, PartitionMethod::flops);
  const std::vector<double> elements(6, 1.0);
  auto by_flops = stage_layer_counts(job, elements, model_layer_costs(job));
  ASSERT_TRUE(by_flops.ok());
  EXPECT_EQ(*by_flops, (std::vector<int64_t>{2, 1, 1, 2}));
  job.pipeline.partition.method = PartitionMethod::uniform;
  EXPECT_EQ(*stage_layer_counts(job, elements, model_layer_costs(job)), (std::vector<int64_t>{2, 2, 1, 1}));
  job.pipeline.partition.method = PartitionMethod::flops;  // costs for another model: said, not ignored
  auto mismatched = stage_layer_counts(job, elements, std::vector<double>(5, 1.0));
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.error().message,
            "[pipeline] partition = \"flops\" has 5 layer costs for a model of 6 layers");
}

}  // namespace
}  // namespace troupe::sim
