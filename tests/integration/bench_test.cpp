// `troupe bench` starts its own ranks and prints one JSON line per size with the
// nccl-tests fields. Only the shape of the output is checked: figures are measured,
// never asserted, in tests.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <optional>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "tests/integration/command.hpp"
#include "tools/bench/busy_core.hpp"

namespace troupe {
namespace {

std::vector<nlohmann::json> bench(const std::string& args) {
  auto r =
      testing::run_command(std::string(TROUPE_BINARY) + " bench " + args + " --json --seconds 0.05", 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    auto json = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(json.is_discarded()) << "not JSON: " << line;
    if (!json.is_discarded()) lines.push_back(json);
  }
  return lines;
}

// The one JSON object `bench pipeline --json` prints after any rank output.
nlohmann::json pipeline_json(const testing::CommandResult& r) {
  const std::size_t at = r.output.find('{');
  return nlohmann::json::parse(at == std::string::npos ? std::string() : r.output.substr(at), nullptr, false);
}

TEST(Bench, CollectivesPrintAlgorithmAndBusBandwidthPerSize) {
  for (const char* kind : {"allreduce", "reduce_scatter", "allgather"}) {
    auto lines = bench(std::string(kind) + " --ranks 2 --bytes 4096 --bytes 1048576");
    ASSERT_EQ(lines.size(), 2u) << kind;
    for (const auto& l : lines) {
      EXPECT_EQ(l.at("bench"), kind);
      EXPECT_EQ(l.at("ranks"), 2);
      EXPECT_GT(l.at("seconds").get<double>(), 0);
      EXPECT_GT(l.at("algbw_GBps").get<double>(), 0);
      double factor = std::string(kind) == "allreduce" ? 1.0 : 0.5;  // 2(n-1)/n and (n-1)/n for n = 2
      EXPECT_NEAR(l.at("busbw_GBps").get<double>(), factor * l.at("algbw_GBps").get<double>(), 1e-9);
    }
    EXPECT_EQ(lines[0].at("bytes"), 4096);
    EXPECT_EQ(lines[1].at("bytes"), 1048576);
  }
}

double process_cpu_seconds_over(std::chrono::milliseconds wall, bool busy) {
  const std::clock_t before = std::clock();
  {
    std::optional<BusyCore> core;
    if (busy) core.emplace();
    std::this_thread::sleep_for(wall);
  }
  return static_cast<double>(std::clock() - before) / CLOCKS_PER_SEC;
}

// A collective measured beside compute: each rank keeps a core busy meanwhile (a thread
// that spins while it lives, and only then).
TEST(Bench, CollectivesBesideABusyCoreOfEachRank) {
  EXPECT_GT(process_cpu_seconds_over(std::chrono::milliseconds(300), true), 0.1);
  EXPECT_LT(process_cpu_seconds_over(std::chrono::milliseconds(300), false), 0.1);
  auto lines = bench("reduce_scatter --ranks 2 --bytes 1048576 --beside-compute");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].value("beside_compute", false));
  EXPECT_GT(lines[0].at("busbw_GBps").get<double>(), 0);
  EXPECT_FALSE(bench("reduce_scatter --ranks 2 --bytes 1048576")[0].contains("beside_compute"));
  auto refused = testing::run_command(std::string(TROUPE_BINARY) + " bench rtt --beside-compute", 60);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("troupe: bench rtt: --beside-compute measures a collective"),
            std::string::npos)
      << refused.output;
}

TEST(Bench, TransportStreamsBetweenTwoProcessesInMegabytesPerSecond) {
  auto lines = bench("transport --bytes 65536");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("bench"), "transport");
  EXPECT_EQ(lines[0].at("ranks"), 2);
  EXPECT_GT(lines[0].at("MBps").get<double>(), 0);
}

TEST(Bench, ActorRoundTripReportsMedianAndTailOverManySamples) {
  auto lines = bench("rtt --bytes 8");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("bench"), "rtt");
  EXPECT_GE(lines[0].at("samples").get<int64_t>(), 50);
  EXPECT_GT(lines[0].at("median_us").get<double>(), 0);
  EXPECT_GE(lines[0].at("p99_us").get<double>(), lines[0].at("median_us").get<double>());
  EXPECT_GT(lines[0].at("wake_pair_us").get<double>(), 0) << "the machine's floor, measured beside it";
}

// Four ranks: two take turns while the other two keep a core busy each.
TEST(Bench, ActorRoundTripAmongComputingRanks) {
  auto lines = bench("rtt --ranks 4 --bytes 64");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("ranks"), 4);
  EXPECT_GE(lines[0].at("samples").get<int64_t>(), 50);
  EXPECT_GT(lines[0].at("median_us").get<double>(), 0);
}

// A pipeline hop: a tensor each way, between two of three ranks (the third computing).
TEST(Bench, TensorHopBetweenTwoOfThreeRanks) {
  auto lines = bench("hop --ranks 3 --bytes 65536");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("bench"), "hop");
  EXPECT_EQ(lines[0].at("ranks"), 3);
  EXPECT_EQ(lines[0].at("samples"), 100);
  EXPECT_GT(lines[0].at("one_way_us").get<double>(), 0.5);
}

// Two stages, four micro-batches of 20 ms layers: the formula's idle fraction is 1/5, and
// the measured one is near it (a bubble of 0, or of a whole step, would be a broken measure).
TEST(Bench, PipelinePrintsTheMeasuredBubbleBesideTheFormula) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) +
                                    " bench pipeline --pp 2 --micro-batches 4 --layer-ms 20 --steps 2 --json",
                                120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = pipeline_json(r);
  ASSERT_FALSE(json.is_discarded()) << r.output;
  EXPECT_EQ(json.at("bench"), "pipeline");
  EXPECT_DOUBLE_EQ(json.at("bubble_formula").get<double>(), 0.2);
  EXPECT_GT(json.at("bubble").get<double>(), 0.1) << r.output;
  EXPECT_LT(json.at("bubble").get<double>(), 0.6) << r.output;
}

// Two replicas of two stages whose layers keep a core busy, passing 64 KB activations: the
// hops the stages waited on are read from the run's own trace (removed after) and their
// median is at least a transfer's latency; a bubble of a whole step would be a broken run.
TEST(Bench, PipelineHopsBetweenComputingStages) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) +
                                    " bench pipeline --spin --pp 2 --dp 2 --bytes 65536 --micro-batches 4"
                                    " --layer-ms 10 --steps 2 --json",
                                120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = pipeline_json(r);
  ASSERT_FALSE(json.is_discarded()) << r.output;
  EXPECT_EQ(json.at("dp"), 2);
  EXPECT_EQ(json.at("bytes"), 65536);
  EXPECT_TRUE(json.at("spin").get<bool>());
  EXPECT_GT(json.at("hops").get<int64_t>(), 0) << r.output;
  EXPECT_GT(json.at("hop_ms").get<double>(), 0.001) << r.output;
  EXPECT_LT(json.at("bubble").get<double>(), 0.9) << r.output;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    EXPECT_EQ(entry.path().filename().string().rfind("troupe-bench-pipeline-", 0), std::string::npos)
        << entry.path() << " left behind";
}

// The job's own model: the tiny GPT at pp 2 with zbv's two chunks per rank. The plan at
// unit costs is zbv's, the plan at the passes' measured costs is a bubble too, each pass
// kind zbv runs has a measured time, and a bubble of a whole step would be a broken run.
// Computes queued before their input arrived waited on the stream itself: the trace's
// "compute wait" track holds those waits, named by what they waited for.
TEST(Bench, PipelineOnTheJobsOwnLayersPrintsThePlanAtTheirCosts) {
  const std::string trace_path =
      (std::filesystem::temp_directory_path() / ("bench-job-trace-" + std::to_string(::getpid()) + ".json"))
          .string();
  auto r = testing::run_command(
      std::string(TROUPE_BINARY) + " bench pipeline --job " + TROUPE_SOURCE_DIR +
          "/configs/tiny-gpt.toml --set cluster.world_size=2 --set parallel.dp=1"
          " --set parallel.pp=2 --set pipeline.schedule=\\\"zbv\\\" --set model.n_layers=4"
          " --set batch.gradient_accumulation_steps=4 --steps 2 --json --trace " +
          trace_path,
      180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = pipeline_json(r);
  ASSERT_FALSE(json.is_discarded()) << r.output;
  EXPECT_EQ(json.at("schedule"), "zbv");
  EXPECT_EQ(json.at("virtual_stages"), 2);
  EXPECT_NEAR(json.at("bubble_plan").get<double>(), 1.0 / 25.0, 1e-9) << "p − 1 slots of 6m + p − 1";
  EXPECT_GE(json.at("bubble_plan_measured_costs").get<double>(), 0.0) << r.output;
  EXPECT_LT(json.at("bubble_plan_measured_costs").get<double>(), 0.5) << r.output;
  for (const char* pass : {"forward_ms", "backward_ms", "input_ms", "weight_ms"})
    EXPECT_GT(json.at(pass).get<double>(), 0.0) << pass << ": " << r.output;
  EXPECT_GT(json.at("tokens_per_s").get<double>(), 0.0);
  EXPECT_LT(json.at("bubble").get<double>(), 0.9) << r.output;

  std::ifstream in(trace_path);
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove(trace_path);
  ASSERT_FALSE(trace.is_discarded());
  std::map<std::pair<int64_t, int64_t>, std::string> threads;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name")
      threads[{e.at("pid").get<int64_t>(), e.at("tid").get<int64_t>()}] = e.at("args").at("name");
  int waits = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("ph", "") != "X" ||
        threads[{e.at("pid").get<int64_t>(), e.at("tid").get<int64_t>()}] != "compute wait")
      continue;
    const std::string name = e.value("name", "");
    waits += name.rfind("activation ", 0) == 0 || name.rfind("gradient ", 0) == 0;
  }
  EXPECT_GT(waits, 0) << "no compute waited on the stream for its input";
}

// --job takes the shape and schedule from the job: the timed layers' options are refused
// beside it, not ignored, and --set only goes with it.
TEST(Bench, PipelineRefusesTimedLayerOptionsBesideAJob) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " bench pipeline --job " + TROUPE_SOURCE_DIR +
                                "/configs/tiny-gpt.toml --schedule zbv");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--schedule excludes --job"), std::string::npos) << r.output;
  r = testing::run_command(std::string(TROUPE_BINARY) + " bench pipeline --set parallel.pp=2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--set requires --job"), std::string::npos) << r.output;
}

TEST(Bench, UnknownKindIsRefused) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " bench alltoall");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("alltoall"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace troupe
