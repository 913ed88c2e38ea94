// The simulator end to end in this process: the real scheduler actors of every rank on the
// virtual clock. At equal costs a schedule's simulated bubble is its paper's; the same seed
// gives the same timeline; injected faults stop the job naming the rank or the link; the
// shipped 1,024-rank job simulates with sane figures.
#include <gtest/gtest.h>

#include <map>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"
#include "runtime/config/load.hpp"
#include "sim/planner.hpp"
#include "sim/simulation.hpp"
#include "sim/step_estimate.hpp"

namespace troupe::sim {
namespace {

constexpr double kForward = 1e-3;  // every block's forward; its backward is twice that

JobConfig job_of(const std::string& text) {
  auto job = load_config_string(text, "job.toml", {});
  EXPECT_TRUE(job) << (job ? "" : job.error().message);
  return job ? *job : JobConfig{};
}

// One host whose links and optimizer cost next to nothing: only compute takes time.
ClusterSpec free_links(int64_t ranks) {
  ClusterSpec c;
  c.source = "cluster.toml";
  c.ranks_per_host = ranks;
  c.device = *device_preset("h100-sxm");
  c.device.optimizer_elements_per_s = 1e18;
  c.host = LinkSpec{1e18, 0, {}, {}, 0, {}, {}};
  c.network = c.host;
  return c;
}

// Blocks cost kForward and 2 kForward; the embedding and the head nothing.
std::vector<LayerCost> equal_blocks(int64_t blocks) {
  std::vector<LayerCost> layers{{0, 0, 0, 0}};
  for (int64_t b = 0; b < blocks; ++b) layers.push_back({kForward, 2 * kForward, 0, 0});
  layers.push_back({0, 0, 0, 0});
  return layers;
}

std::string pipeline_job(const std::string& schedule, int64_t pp, int64_t micro, int64_t chunks) {
  std::vector<std::string> counts(static_cast<std::size_t>(pp * chunks), "1");
  counts.front() = counts.back() = "2";  // the embedding and the head ride with the first and last block
  return fmt::format(
      "[cluster]\nworld_size = {}\n[parallel]\npp = {}\n[pipeline]\nschedule = \"{}\"\nvirtual_stages = {}\n"
      "partition = [{}]\n[batch]\nmicro_batch_size = 2\ngradient_accumulation_steps = {}\n"
      "[model]\nseq_len = 16\nd_model = 32\nn_layers = {}\nn_heads = 2\n",
      pp, pp, schedule, chunks, fmt::join(counts, ", "), micro, pp * chunks);
}

struct ScheduleCase {
  std::string schedule;
  int64_t pp, micro, chunks;
};

class SimulatedBubble : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(SimulatedBubble, IsThePapersAtEqualCosts) {
  const ScheduleCase& c = GetParam();
  JobConfig job = job_of(pipeline_job(c.schedule, c.pp, c.micro, c.chunks));
  auto result = simulate_job(job, free_links(c.pp), equal_blocks(c.pp * c.chunks), {1, false});
  ASSERT_TRUE(result) << result.error().message;
  ASSERT_EQ(result->error, "");
  const double formula = pipeline::bubble_formula(c.schedule, {c.pp, c.micro, c.chunks});
  // A chunk's forward, input half and weight half each cost kForward: the step is the
  // paper's slots of kForward, plus what the links and the update cost (next to nothing).
  if (c.schedule == "zbv")
    EXPECT_LE(result->bubble, formula + 0.01);
  else
    EXPECT_NEAR(result->bubble, formula, 0.01);
  // Per rank: a forward and a backward of every micro-batch on each of its chunks.
  const double busy = 3 * kForward * static_cast<double>(c.micro * c.chunks);
  EXPECT_NEAR(result->step_ms.front() / 1e3, busy / (1 - result->bubble), 0.01 * busy);
}

INSTANTIATE_TEST_SUITE_P(Schedules, SimulatedBubble,
                         ::testing::Values(ScheduleCase{"1f1b", 4, 8, 1}, ScheduleCase{"gpipe", 4, 8, 1},
                                           ScheduleCase{"interleaved_1f1b", 4, 8, 2},
                                           ScheduleCase{"zb_h1", 4, 8, 1}, ScheduleCase{"zbv", 4, 8, 2}),
                         [](const auto& info) { return info.param.schedule; });

std::string dp_pipeline_job() {
  return "[cluster]\nworld_size = 8\n[parallel]\ndp = 2\npp = 4\n[zero]\nstage = 1\n"
         "[batch]\nmicro_batch_size = 2\ngradient_accumulation_steps = 8\n"
         "[model]\nseq_len = 32\nd_model = 64\nn_layers = 6\nn_heads = 2\n";
}

ClusterSpec jittery(uint64_t seed) {
  ClusterSpec c;
  c.source = "cluster.toml";
  c.hosts = 2;
  c.ranks_per_host = 4;
  c.device = *device_preset("h100-sxm");
  c.host = LinkSpec{100e9, 2e-6, {}, {}, 0, {}, {}};
  c.network = LinkSpec{10e9, 5e-6, {}, {}, 0, {}, {}};
  c.rails = 4;
  c.seed = seed;
  c.jitter = 0.1;
  return c;
}

TEST(Simulation, TheSameSeedGivesTheSameTimelineAndAnotherSeedAnother) {
  JobConfig job = job_of(dp_pipeline_job());
  auto layers = flops_layer_costs(job, jittery(1));
  ASSERT_TRUE(layers);
  auto a = simulate_job(job, jittery(1), *layers, {3, true});
  auto b = simulate_job(job, jittery(1), *layers, {3, true});
  auto c = simulate_job(job, jittery(2), *layers, {3, true});
  ASSERT_TRUE(a && b && c);
  ASSERT_EQ(a->error, "");
  EXPECT_EQ(a->step_ms.size(), 3u);
  EXPECT_GT(a->timeline.size(), 100u);
  EXPECT_EQ(timeline_json(*a), timeline_json(*b));
  EXPECT_EQ(a->step_ms, b->step_ms);
  EXPECT_NE(timeline_json(*a), timeline_json(*c));
}

TEST(Simulation, ASlowRankSlowsEveryone) {
  JobConfig job = job_of(dp_pipeline_job());
  // Stage 1 holds two of the six blocks: the most any holds.
  job.pipeline.partition.method = PartitionMethod::uniform;
  ClusterSpec even = jittery(1), slow = jittery(1);
  even.jitter = slow.jitter = 0;
  slow.faults.push_back(Fault{FaultKind::slow_rank, 5, -1, 2.0, 0, "cluster.toml:9:1"});
  const std::vector<LayerCost> layers = equal_blocks(6);
  auto fast = simulate_job(job, even, layers, {1, false});
  auto slowed = simulate_job(job, slow, layers, {1, false});
  ASSERT_TRUE(fast && slowed);
  // Rank 5 (stage 1 of replica 1) computes at half speed: its pipeline and, through the
  // gradient reduction, the other replica wait for it.
  EXPECT_GT(slowed->step_ms_median(), 1.5 * fast->step_ms_median());
}

// Measured noise: rank r replays process (r mod n)'s passes. Processes that were slow at
// the same moments keep their ranks together; one slower than the other makes the other
// rank wait at the reduction, which uniform jitter cannot.
TEST(Simulation, ReplaysEachMeasuredProcesssPassesOnItsRanks) {
  JobConfig job = job_of(
      "[cluster]\nworld_size = 2\n[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 2\n"
      "gradient_accumulation_steps = 4\n[model]\nseq_len = 16\nd_model = 32\nn_layers = 2\nn_heads = 2\n");
  const std::vector<double> bursty{2, 1, 2, 1, 1, 1, 3, 1}, slow(8, 2.0), steady(8, 1.0);
  ClusterSpec together = free_links(2), apart = free_links(2), quiet = free_links(2);
  together.noise = {bursty, bursty};
  apart.noise = {slow, steady};
  quiet.noise = {steady, steady};
  const std::vector<LayerCost> layers = equal_blocks(2);
  auto t = simulate_job(job, together, layers, {6, false});
  auto a = simulate_job(job, apart, layers, {6, false});
  auto a2 = simulate_job(job, apart, layers, {6, false});
  auto q = simulate_job(job, quiet, layers, {6, false});
  ASSERT_TRUE(t && a && a2 && q);
  // Bursts both processes saw: nobody waits, but the step is longer than at the medians.
  EXPECT_LT(t->bubble, 0.02);
  EXPECT_GT(t->step_ms_median(), 1.2 * q->step_ms_median());
  // Rank 0 computes twice as long as rank 1: rank 1 idles half of each step, rank 0 none.
  EXPECT_NEAR(a->bubble, 0.25, 0.03);
  EXPECT_NEAR(a->stages[0].bubble, a->bubble, 1e-12);  // dp: the one stage holds both ranks
  EXPECT_NEAR(a->step_ms_median(), 2 * q->step_ms_median(), 0.05 * q->step_ms_median());
  EXPECT_EQ(a->step_ms, a2->step_ms);
  EXPECT_EQ(a->noise_passes, 16);
  EXPECT_DOUBLE_EQ(a->noise_mean, 1.5);
}

// Four ranks of one thread on a 2-core CPU host: each collective member's progress thread
// is a core's worth of work, so with no compute running the group's collectives take twice
// their link time; on devices of their own they take just that.
TEST(Simulation, ACpuHostsCollectivesShareItsCores) {
  JobConfig job = job_of(
      "[cluster]\nworld_size = 4\n[parallel]\ndp = 4\n[zero]\nstage = 1\n[train]\nthreads = 1\n"
      "[batch]\nmicro_batch_size = 2\ngradient_accumulation_steps = 2\n"
      "[model]\nseq_len = 16\nd_model = 32\nn_layers = 2\nn_heads = 2\n");
  ClusterSpec devices = free_links(4);
  devices.host = LinkSpec{1e6, 0, {}, {}, 0, {}, {}};  // slow enough that the collectives dominate
  ClusterSpec cpu = devices;
  cpu.device.kind = "cpu";
  cpu.device.cores = 2;
  auto apart = simulate_job(job, devices, equal_blocks(2), {1, false});
  auto shared = simulate_job(job, cpu, equal_blocks(2), {1, false});
  ASSERT_TRUE(apart && shared);
  ASSERT_GT(apart->exposed_comm_ms, 10 * kForward * 1e3);
  EXPECT_GT(shared->exposed_comm_ms, 1.8 * apart->exposed_comm_ms);
  EXPECT_LT(shared->exposed_comm_ms, 2.2 * apart->exposed_comm_ms);
}

struct Reducing {
  ClusterSpec cluster;
  int64_t elements = 0;  // of the gradient
};

// Two ranks of equal_blocks(2) whose host link moves the job's fp32 gradient in `seconds`.
Reducing reducing_in(const std::string& text, double seconds) {
  Reducing r{free_links(2), 0};
  auto costs = job_costs(job_of(text), r.cluster, equal_blocks(2));
  EXPECT_TRUE(costs) << (costs ? "" : costs.error().message);
  if (costs) r.elements = costs->stages[0].parameters;
  r.cluster.host = LinkSpec{static_cast<double>(r.elements) * 4 / seconds, 0, {}, {}, 0, {}, {}};
  return r;
}

// The gradients go in rows of at most reduce_bucket_size elements: one row of the whole
// model is reduced after the backward as if overlap_comm were off; rows of a quarter of it
// leave only what the backward could not cover.
TEST(Simulation, AReductionOverlapsTheBackwardRowByRow) {
  const std::string text =
      "[cluster]\nworld_size = 2\n[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 2\n"
      "[model]\nseq_len = 16\nd_model = 32\nn_layers = 2\nn_heads = 2\n[zero]\nstage = 0\n";
  // The reduction about as long as the backward (two blocks, 4 kForward).
  const auto [cluster, elements] = reducing_in(text, 4 * kForward);
  const std::vector<LayerCost> layers = equal_blocks(2);
  const auto exposed = [&](const std::string& zero) {
    JobConfig job = job_of(text + zero);
    auto result = simulate_job(job, cluster, layers, {2, false});
    EXPECT_TRUE(result && result->error.empty());
    return result ? result->exposed_comm_ms : 0.0;
  };
  const double off = exposed("overlap_comm = false\n");
  ASSERT_GT(off, 0.5 * 4 * kForward * 1e3);
  EXPECT_NEAR(exposed(fmt::format("reduce_bucket_size = {}\n", elements)), off, 0.02 * off);
  EXPECT_LT(exposed(fmt::format("reduce_bucket_size = {}\n", elements / 4)), 0.6 * off);
}

// ZeRO 2 and 3 keep no full gradient: each micro-batch's is reduce-scattered when its backward
// ends (as the runtime's stage 2 does), where stage 1 reduces the accumulated gradients once.
TEST(Simulation, ZeroTwoReducesEveryMicroBatchAndStageOneOnceAStep) {
  const std::string text =
      "[cluster]\nworld_size = 2\n[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 2\n"
      "gradient_accumulation_steps = 4\n[model]\nseq_len = 16\nd_model = 32\nn_layers = 2\nn_heads = 2\n"
      "[zero]\noverlap_comm = false\n";
  // A reduction (half the gradient each way between two) about as long as a block's backward.
  const ClusterSpec cluster = reducing_in(text, 4 * kForward).cluster;
  const std::vector<LayerCost> layers = equal_blocks(2);
  struct Seen {
    double step_ms = 0, reduction_ms = 0;
    int64_t micro_batch_reductions = 0, step_reductions = 0;
  };
  const auto simulate = [&](int stage) {
    Seen seen;
    auto result = simulate_job(job_of(text + fmt::format("stage = {}\n", stage)), cluster, layers, {2, true});
    EXPECT_TRUE(result && result->error.empty());
    if (!result) return seen;
    seen.step_ms = result->step_ms_median();
    for (const TimelineEvent& e : result->timeline) {
      if (e.rank != 0 || e.track != Track::collective) continue;
      if (e.name.rfind("gradient reduction of micro-batch", 0) == 0) ++seen.micro_batch_reductions;
      if (e.name.rfind("gradient reduction (", 0) == 0) ++seen.step_reductions;
      if (e.name.rfind("gradient reduction", 0) == 0) seen.reduction_ms = nanos_to_ms(e.end - e.start);
    }
    return seen;
  };
  const Seen once = simulate(1), each = simulate(2);
  EXPECT_EQ(once.step_reductions, 2);
  EXPECT_EQ(once.micro_batch_reductions, 0);
  EXPECT_EQ(each.step_reductions, 0);
  EXPECT_EQ(each.micro_batch_reductions, 8);
  // Without overlap_comm every one of them holds the computes up.
  ASSERT_GT(once.reduction_ms, kForward * 1e3);
  EXPECT_GT(each.step_ms, once.step_ms + 2.5 * once.reduction_ms);
}

// Two ranks of one thread on a 2-core CPU host, whose collectives were measured idle and
// beside computes. A micro-batch's reduction that starts while the next pass computes takes
// the figure measured beside computes, the last one (nothing left to compute) the idle one;
// ZeRO-3's gathers run beside each pass and take their share of the cores from it.
TEST(Simulation, CollectivesBesideComputesTakeTheirFigureAndTheirShareOfTheCores) {
  const std::string text =
      "[cluster]\nworld_size = 2\n[parallel]\ndp = 2\n[train]\nthreads = 1\n[batch]\nmicro_batch_size = 2\n"
      "gradient_accumulation_steps = 4\n[model]\nseq_len = 16\nd_model = 32\nn_layers = 2\nn_heads = 2\n";
  ClusterSpec cpu = free_links(2);
  cpu.device.kind = "cpu";
  cpu.device.cores = 2;
  const std::vector<LayerCost> layers = equal_blocks(2);
  auto costs = job_costs(job_of(text), cpu, layers);
  ASSERT_TRUE(costs) << costs.error().message;
  // Idle, half the gradient each way in a tenth of a block's forward; beside computes ten
  // times that (at full speed: the figure's four threads had half a core each).
  const double busbw = static_cast<double>(costs->stages[0].reduce_bytes) / 2 / (0.1 * kForward);
  cpu.host = LinkSpec{1e18, 0,  {{"reduce_scatter", busbw}, {"all_gather", busbw}},          {},
                      2,    {}, {{"reduce_scatter", busbw / 20}, {"all_gather", busbw / 20}}};
  auto zero2 = simulate_job(job_of(text + "[zero]\nstage = 2\n"), cpu, layers, {2, true});
  ASSERT_TRUE(zero2 && zero2->error.empty());
  std::map<std::string, double> took;  // rank 0's, by name
  for (const TimelineEvent& e : zero2->timeline)
    if (e.rank == 0 && e.track == Track::collective) took[e.name] = nanos_to_ms(e.end - e.start);
  const double last = took.at("gradient reduction of micro-batch 3 (virtual stage 0)");
  EXPECT_LT(last, 3 * 0.1 * kForward * 1e3);  // its time, and what overlap let it begin early
  for (int m = 0; m < 3; ++m)
    EXPECT_GT(took.at(fmt::format("gradient reduction of micro-batch {} (virtual stage 0)", m)), 5 * last)
        << m;
  // ZeRO-3 on the CPU host and on devices of their own, whose gathers take no core.
  const auto forward_ms = [&](const ClusterSpec& cluster) {
    auto r = simulate_job(job_of(text + "[zero]\nstage = 3\n"), cluster, layers, {2, true});
    EXPECT_TRUE(r && r->error.empty());
    double sum = 0, count = 0;
    for (const TimelineEvent& e : r->timeline)
      if (r && e.rank == 0 && e.track == Track::compute && e.name[0] == 'F')
        sum += nanos_to_ms(e.end - e.start), ++count;
    return count > 0 ? sum / count : 0.0;
  };
  ClusterSpec devices = cpu;
  devices.device.kind = "gpu";
  EXPECT_GT(forward_ms(cpu), 1.2 * forward_ms(devices));
}

// ZeRO-3's ranks agree on a forward's layer sequence before it runs: with rank 1 twice as
// slow, rank 0 starts each forward with it, where under ZeRO-2 it runs ahead until the
// step's last reduction.
TEST(Simulation, ZeroThreeRanksAgreeOnEachForwardsLayers) {
  const std::string text =
      "[cluster]\nworld_size = 2\n[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 2\n"
      "gradient_accumulation_steps = 4\n[model]\nseq_len = 16\nd_model = 32\nn_layers = 2\nn_heads = 2\n";
  ClusterSpec slow = free_links(2);
  slow.faults.push_back(Fault{FaultKind::slow_rank, 1, -1, 2.0, 0, "cluster.toml:9:1"});
  struct Seen {
    std::map<std::pair<int64_t, std::string>, Nanos> forward_start;  // the first step's, by rank and name
    int64_t agreements = 0;                                          // rank 0's
  };
  const auto simulate = [&](int stage) {
    Seen seen;
    auto r = simulate_job(job_of(text + fmt::format("[zero]\nstage = {}\n", stage)), slow, equal_blocks(2),
                          {2, true});
    EXPECT_TRUE(r && r->error.empty());
    if (!r) return seen;
    for (const TimelineEvent& e : r->timeline) {
      if (e.track == Track::compute && e.name[0] == 'F')
        seen.forward_start.emplace(std::pair{e.rank, e.name}, e.start);
      if (e.rank == 0 && e.name.rfind("layer sequence of micro-batch", 0) == 0) ++seen.agreements;
    }
    return seen;
  };
  const Seen zero3 = simulate(3), zero2 = simulate(2);
  EXPECT_EQ(zero3.agreements, 8);  // each forward of two steps
  EXPECT_EQ(zero2.agreements, 0);
  for (const char* f : {"F1", "F2", "F3"}) {
    EXPECT_EQ(zero3.forward_start.at({0, f}), zero3.forward_start.at({1, f})) << f;
    EXPECT_LT(zero2.forward_start.at({0, f}), zero2.forward_start.at({1, f})) << f;
  }
}

TEST(Simulation, ADeadRankOrALostLinkStopsTheJobNamingIt) {
  JobConfig job = job_of(dp_pipeline_job());
  ClusterSpec dead = jittery(1), lost = jittery(1);
  dead.faults.push_back(Fault{FaultKind::dead_rank, 6, -1, 1, 0, "cluster.toml:12:1"});
  lost.faults.push_back(Fault{FaultKind::lost_link, 1, 2, 1, 0, "cluster.toml:14:1"});
  auto layers = flops_layer_costs(job, dead);
  ASSERT_TRUE(layers);
  auto a = simulate_job(job, dead, *layers, {2, false});
  ASSERT_TRUE(a);
  EXPECT_NE(a->error.find("rank 6 stopped (dead_rank fault at 0 ms, cluster.toml:12:1)"), std::string::npos)
      << a->error;
  EXPECT_NE(a->error.find("no answer within peer_timeout_s = 10 s"), std::string::npos) << a->error;
  auto b = simulate_job(job, lost, *layers, {2, false});
  ASSERT_TRUE(b);
  EXPECT_NE(b->error.find(
                "the link between rank 1 and rank 2 is lost (lost_link fault at 0 ms, cluster.toml:14:1)"),
            std::string::npos)
      << b->error;
  auto again = simulate_job(job, lost, *layers, {2, false});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->error, b->error);  // a seeded fault replays
}

TEST(Simulation, TheShippedSeventyBillionJobOnOneThousandRanks) {
  auto job = load_config_file(TROUPE_SOURCE_DIR "/configs/sim/gpt-70b.toml", {});
  ASSERT_TRUE(job) << job.error().message;
  auto cluster = load_cluster_file(TROUPE_SOURCE_DIR "/configs/sim/h200-128x8.toml");
  ASSERT_TRUE(cluster) << cluster.error().message;
  auto layers = flops_layer_costs(*job, *cluster);
  ASSERT_TRUE(layers);
  auto r = simulate_job(*job, *cluster, *layers, {1, false});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->error, "");
  EXPECT_EQ(r->ranks, 1024);
  // 6·N·tokens over the cluster's peak at the MFU the step reaches is the step time.
  const double tokens = 1024.0 * 4096, peak = 1024 * 989e12;
  EXPECT_NEAR(r->step_ms_median() / 1e3, r->step_flops / (peak * r->mfu), 1e-6);
  EXPECT_GT(r->step_flops, 6 * 70e9 * tokens);
  EXPECT_GT(r->mfu, 0.25);
  EXPECT_LT(r->mfu, 0.55);  // below the efficiency the products were given
  EXPECT_LT(r->peak_bytes, 141'000'000'000);
  EXPECT_GT(r->bubble, 0.05);  // 1F1B over 8 stages and 64 micro-batches: 7/71 at least
}

// The planner's closed-form step time against the simulation where only compute costs
// anything: a schedule's passes at equal costs take what the simulated pipeline takes.
TEST(Estimate, EqualsTheSimulatedStepWhereOnlyComputeCosts) {
  for (const ScheduleCase& c : {ScheduleCase{"1f1b", 1, 4, 1}, ScheduleCase{"1f1b", 4, 8, 1},
                                ScheduleCase{"zb_h1", 4, 8, 1}, ScheduleCase{"interleaved_1f1b", 2, 4, 2}}) {
    JobConfig job = job_of(pipeline_job(c.schedule, c.pp, c.micro, c.chunks));
    ClusterSpec cluster = free_links(c.pp);
    auto layers = equal_blocks(c.pp * c.chunks);
    auto costs = job_costs(job, cluster, layers);
    ASSERT_TRUE(costs) << costs.error().message;
    auto estimate = estimate_step(job, cluster, *costs);
    ASSERT_TRUE(estimate) << estimate.error().message;
    auto simulated = simulate_job(job, cluster, layers, {1, false});
    ASSERT_TRUE(simulated && simulated->error.empty());
    EXPECT_NEAR(estimate->step_ms / simulated->step_ms_median(), 1.0, 0.05)
        << c.schedule << " pp " << c.pp << ": estimated " << estimate->step_ms << " ms, simulated "
        << simulated->step_ms_median() << " ms";
  }
}

TEST(Plan, RanksEveryLayoutThatFitsAndRefusesWhatDoesNot) {
  JobConfig job = job_of(
      "[cluster]\nworld_size = 4\n[batch]\nglobal_batch_size = 16\nmicro_batch_size = 4\n"
      "[model]\nseq_len = 64\nd_model = 128\nn_layers = 4\nn_heads = 4\n");
  ClusterSpec cluster = jittery(1);
  cluster.hosts = 1;
  cluster.jitter = 0;
  const auto candidates = plan_candidates(job, cluster);
  // tp 1, 2, 4 (heads 4) × pp dividing 4/tp × micro dividing 16/dp × schedules × ZeRO stages.
  EXPECT_GT(candidates.size(), 40u);
  LayerCostSource flops = [&](const JobConfig& j) { return flops_layer_costs(j, cluster); };
  auto plan = plan_job(job, cluster, flops);
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_FALSE(plan->ranked.empty());
  double fastest = plan->ranked.front().step_ms;
  for (const PlannedJob& p : plan->ranked) fastest = std::min(fastest, p.step_ms);
  EXPECT_LE(plan->ranked.front().step_ms, 1.01 * fastest);  // the chosen is within the tie of the fastest
  const PlannedJob& best = plan->ranked.front();
  EXPECT_EQ(best.job.parallel.dp * best.job.parallel.pp * best.job.parallel.tp, 4);
  EXPECT_EQ(best.job.batch.global_batch_size, 16);
  EXPECT_LE(best.peak_bytes, plan->memory_budget);
  for (const PlannedJob& p : plan->refused) EXPECT_FALSE(p.refused.empty()) << p.candidate.describe();

  cluster.device.memory_bytes = 1000;  // nothing fits: pruned by model state before any simulation
  auto none = plan_job(job, cluster, flops);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->ranked.empty());
  EXPECT_EQ(none->simulated, 0);
  ASSERT_FALSE(none->pruned.empty());
  EXPECT_EQ(none->pruned_memory, static_cast<int64_t>(none->pruned.size()));
  EXPECT_GT(none->smallest_need, none->memory_budget);
  EXPECT_NE(none->pruned.front().refused.find("more than its 0.00 GB"), std::string::npos)
      << none->pruned.front().refused;
}

// The job of the Plan tests: small enough that simulating every layout takes seconds.
JobConfig small_plan_job() {
  return job_of(
      "[cluster]\nworld_size = 8\n[batch]\nglobal_batch_size = 32\nmicro_batch_size = 4\n"
      "[model]\nseq_len = 128\nd_model = 256\nn_layers = 8\nn_heads = 8\n");
}

// Pruning (memory, then the closed-form estimate) and simulating the contenders finds what
// simulating every layout finds, on clusters whose layouts differ in kind: one host with
// fast links, and two hosts with a slow network between them.
TEST(Plan, ThePrunedAnswerIsTheExhaustiveOne) {
  for (int64_t hosts : {1, 2}) {
    JobConfig job = small_plan_job();
    ClusterSpec cluster = jittery(1);
    cluster.hosts = hosts;
    cluster.ranks_per_host = 8 / hosts;
    cluster.jitter = 0;
    LayerCostSource flops = [&](const JobConfig& j) { return flops_layer_costs(j, cluster); };
    PlanOptions exhaustive;
    exhaustive.exhaustive = true;
    auto all = plan_job(job, cluster, flops, exhaustive);
    auto pruned = plan_job(job, cluster, flops);
    ASSERT_TRUE(all && pruned);
    ASSERT_FALSE(all->ranked.empty());
    ASSERT_FALSE(pruned->ranked.empty());
    EXPECT_LT(pruned->simulated * 4, all->simulated) << "most layouts are not simulated";
    EXPECT_EQ(pruned->considered, all->considered);
    EXPECT_EQ(pruned->considered,
              static_cast<int64_t>(pruned->ranked.size() + pruned->refused.size() + pruned->pruned.size()));
    const PlannedJob &chosen = pruned->ranked.front(), &best = all->ranked.front();
    EXPECT_LE(chosen.step_ms, 1.02 * best.step_ms)
        << hosts << " hosts: " << chosen.candidate.describe() << " against " << best.candidate.describe();
    std::printf(
        "%lld host(s): %lld layouts, %lld simulated of them; pruned plan %s %.3f ms, exhaustive %s %.3f ms\n",
        static_cast<long long>(hosts), static_cast<long long>(all->considered),
        static_cast<long long>(pruned->simulated), chosen.candidate.describe().c_str(), chosen.step_ms,
        best.candidate.describe().c_str(), best.step_ms);
  }
}

// The shipped 70 B GPT on one host of 8 H100: only layouts with the optimizer state on the
// host fit, and pruning by memory keeps exactly the layouts the simulation would accept.
TEST(Plan, PruningByMemoryKeepsWhatTheSimulationWouldAccept) {
  auto job = load_config_file(TROUPE_SOURCE_DIR "/configs/sim/gpt-70b.toml", {});
  auto cluster = load_cluster_file(TROUPE_SOURCE_DIR "/configs/sim/h100-1x8.toml");
  ASSERT_TRUE(job && cluster);
  LayerCostSource flops = [&](const JobConfig& j) { return flops_layer_costs(j, *cluster); };
  PlanOptions exhaustive;
  exhaustive.exhaustive = true;
  auto all = plan_job(*job, *cluster, flops, exhaustive), pruned = plan_job(*job, *cluster, flops);
  ASSERT_TRUE(all && pruned);
  ASSERT_FALSE(pruned->ranked.empty());
  EXPECT_GT(pruned->pruned_memory, 10 * pruned->simulated);
  EXPECT_EQ(pruned->ranked.front().candidate.describe(), all->ranked.front().candidate.describe());
  EXPECT_EQ(pruned->ranked.front().step_ms, all->ranked.front().step_ms);
  EXPECT_NE(pruned->ranked.front().candidate.offload, OffloadTier::none);
}

// Simulations run side by side, each placed by its contender: one thread or several, the
// same ranking.
TEST(Plan, SimulationsOnSeveralThreadsRankAsOneThreadDoes) {
  JobConfig job = small_plan_job();
  ClusterSpec cluster = jittery(3);  // jitter on: each simulation draws its own noise by seed
  LayerCostSource flops = [&](const JobConfig& j) { return flops_layer_costs(j, cluster); };
  PlanOptions one, four;
  one.threads = 1;
  four.threads = 4;
  auto a = plan_job(job, cluster, flops, one), b = plan_job(job, cluster, flops, four);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->ranked.size(), b->ranked.size());
  ASSERT_GT(a->ranked.size(), 1u);
  for (std::size_t i = 0; i < a->ranked.size(); ++i) {
    EXPECT_EQ(a->ranked[i].candidate.describe(), b->ranked[i].candidate.describe()) << i;
    EXPECT_EQ(a->ranked[i].step_ms, b->ranked[i].step_ms) << i;
  }
}

// A budget too short for more than one simulation: the best estimate's runs, the plan
// answers with it and counts what it left.
TEST(Plan, ABudgetAnswersWithWhatItSimulatedAndCountsTheRest) {
  JobConfig job = small_plan_job();
  ClusterSpec cluster = jittery(1);
  LayerCostSource flops = [&](const JobConfig& j) { return flops_layer_costs(j, cluster); };
  PlanOptions tight;
  tight.budget_s = 1e-9;
  tight.threads = 1;
  std::vector<PlanProgress> seen;
  tight.progress = [&](const PlanProgress& p) { seen.push_back(p); };
  auto plan = plan_job(job, cluster, flops, tight);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->simulated, 1);
  ASSERT_EQ(plan->ranked.size(), 1u);
  EXPECT_GT(plan->unsimulated_budget, 0);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().considered, plan->considered);
  EXPECT_EQ(seen.back().contenders, plan->simulated + plan->unsimulated_budget);
}

}  // namespace
}  // namespace troupe::sim
