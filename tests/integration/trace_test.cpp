// Tracing: a 2-rank run writes one Chrome-trace/Perfetto timeline with a process per
// rank and a thread track per actor and stream; under ZeRO stages 2 and 3 it shows
// reduction and gathering running while compute runs; with virtual stages, each rank's
// compute stream runs its chunks' work in the order the schedule planned.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pipeline/schedule.hpp"
#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

TEST(Trace, TwoRanksMergeIntoOneTimelineWithTracksPerActorAndStream) {
  std::string dir = testing::make_temp_dir();
  std::string trace = dir + "/trace.json";
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR +
                                "/configs/tiny-gpt.toml --set train.steps=3 --set cluster.coordinator=" +
                                testing::free_coordinator() + " --set trace.path=" + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = nlohmann::json::parse(testing::read_file(trace), nullptr, false);
  ASSERT_FALSE(json.is_discarded());
  std::set<std::string> processes, tracks;
  std::set<int> ranks_with_spans;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") processes.insert(e.at("args").at("name"));
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks.insert(e.at("args").at("name"));
    if (e.at("ph") == "X") ranks_with_spans.insert(e.at("pid").get<int>());
  }
  EXPECT_EQ(processes, (std::set<std::string>{"rank 0", "rank 1"}));
  for (const char* track : {"stream compute", "stream data", "comm", "stage", "scheduler", "comm_agent"})
    EXPECT_TRUE(tracks.count(track)) << track;
  EXPECT_EQ(ranks_with_spans, (std::set<int>{0, 1}));
  EXPECT_NE(r.output.find(trace), std::string::npos) << "the summary names the trace: " << r.output;
}

using Interval = std::pair<double, double>;

// The spans of `track` on rank 0 whose name starts with `prefix`.
std::vector<Interval> spans(const nlohmann::json& json, const std::string& track, const std::string& prefix) {
  std::map<int, std::string> names;
  for (const auto& e : json.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("pid") == 0)
      names[e.at("tid").get<int>()] = e.at("args").at("name");
  std::vector<Interval> out;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("pid") != 0 || names[e.at("tid").get<int>()] != track) continue;
    if (e.at("name").get<std::string>().rfind(prefix, 0) != 0) continue;
    double start = e.at("ts").get<double>();
    out.emplace_back(start, start + e.at("dur").get<double>());
  }
  return out;
}

// Microseconds in which a span of `a` runs while compute runs and compute is not
// blocked waiting for communication.
double overlap_with_compute(const std::vector<Interval>& a, const std::vector<Interval>& compute,
                            const std::vector<Interval>& waits) {
  double total = 0;
  for (const auto& [s, e] : a)
    for (const auto& [cs, ce] : compute) {
      double lo = std::max(s, cs), hi = std::min(e, ce);
      if (hi <= lo) continue;
      double busy = hi - lo;
      for (const auto& [ws, we] : waits) busy -= std::max(0.0, std::min(hi, we) - std::max(lo, ws));
      total += std::max(0.0, busy);
    }
  return total;
}

// How many spans of `a` end while compute runs and is not blocked waiting for
// communication: a gather that lands then was fetched ahead of its use. A gather's span
// is often a few microseconds (its bytes arrive in one chunk), so this counts them
// rather than summing time, which a loaded machine can push to zero.
int landed_during_compute(const std::vector<Interval>& a, const std::vector<Interval>& compute,
                          const std::vector<Interval>& waits) {
  auto inside = [](double t, const std::vector<Interval>& spans) {
    return std::any_of(spans.begin(), spans.end(),
                       [t](const Interval& s) { return s.first <= t && t <= s.second; });
  };
  return static_cast<int>(std::count_if(a.begin(), a.end(), [&](const Interval& s) {
    return inside(s.second, compute) && !inside(s.second, waits);
  }));
}

// Rank 0's trace of a short run at ZeRO `stage`, with gradient rows small enough that
// several are reduced per step and stage-3 rows freed after use, plus `settings`.
nlohmann::json traced_run(int stage, const std::string& settings) {
  std::string trace = testing::make_temp_dir() + "/trace.json";
  auto r = testing::run_command(
      std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR +
      "/configs/tiny-gpt.toml --set train.steps=3" +
      " --set model.d_model=128 --set model.n_layers=3 --set zero.stage=" + std::to_string(stage) +
      " --set zero.reduce_bucket_size=65536 --set zero.param_persistence_threshold=1000" +
      " --set zero.max_reuse_distance=0 --set zero.prefetch_bucket_size=400000" +
      " --set cluster.coordinator=" + testing::free_coordinator() + " --set trace.path=" + trace + settings);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto json = nlohmann::json::parse(testing::read_file(trace), nullptr, false);
  EXPECT_FALSE(json.is_discarded());
  return json.is_discarded() ? nlohmann::json{{"traceEvents", nlohmann::json::array()}} : json;
}

// A "comm" span runs from the first chunk its collective received to its completion
// (the transport records it), so it is time bytes were on the wire. Stage 2
// reduce-scatters gradient rows while backward still computes the rows after them;
// stage 3 also gathers the next layer's parameters (prefetch) while one computes.
TEST(Trace, GradientRowsAreOnTheWireWhileBackwardComputes) {
  for (int stage : {2, 3}) {
    auto json = traced_run(stage, "");
    auto backward = spans(json, "stream compute", "autograd backward");
    auto waits = spans(json, "compute wait", "");
    auto reduces = spans(json, "comm", "reduce_scatter");
    ASSERT_EQ(backward.size(), 3u) << "one backward per step";
    ASSERT_GT(reduces.size(), 3u) << "several gradient rows per step";
    EXPECT_GT(overlap_with_compute(reduces, backward, waits), 0) << "stage " << stage;
    if (stage == 3) {
      auto compute = spans(json, "stream compute", "forward ");
      compute.insert(compute.end(), backward.begin(), backward.end());
      auto gathers = spans(json, "comm", "all_gather");
      ASSERT_GT(gathers.size(), 6u);
      EXPECT_GT(landed_during_compute(gathers, compute, waits), 0)
          << "prefetched gathers land during compute";
    }
  }
}

// The control: with overlap_comm off, backward waits for each row it posts, and the
// same measure finds no reduction beside backward — it can tell overlap from none.
TEST(Trace, WithoutOverlapCommNoGradientRowIsOnTheWireWhileBackwardComputes) {
  auto json = traced_run(2, " --set zero.overlap_comm=false");
  auto backward = spans(json, "stream compute", "autograd backward");
  auto reduces = spans(json, "comm", "reduce_scatter");
  ASSERT_EQ(backward.size(), 3u);
  ASSERT_GT(reduces.size(), 3u);
  EXPECT_EQ(overlap_with_compute(reduces, backward, spans(json, "compute wait", "")), 0);
}

// Two chunks per rank share the rank's compute stream (ZeRO 0-1). Their actors get inputs
// in whatever order messages arrive, but the scheduler hands a chunk its next compute action
// only once the one before it is on the stream, so each rank's stream runs exactly its
// program's compute actions in order, as planned, step after step.
TEST(Trace, ChunksSharingAStreamComputeInTheirProgramsOrder) {
  const int64_t stages = 2, micro = 4;
  std::string trace = testing::make_temp_dir() + "/trace.json";
  auto r = testing::run_command(
      std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR +
      "/configs/tiny-gpt.toml --set train.steps=4 --set parallel.pp=2 --set parallel.dp=1" +
      " --set pipeline.schedule=interleaved_1f1b --set batch.micro_batch_size=2" +
      " --set batch.gradient_accumulation_steps=4 --set batch.global_batch_size=8" +
      " --set cluster.coordinator=" + testing::free_coordinator() + " --set trace.path=" + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto json = nlohmann::json::parse(testing::read_file(trace), nullptr, false);
  ASSERT_FALSE(json.is_discarded());
  auto programs = pipeline::make_programs("interleaved_1f1b", {stages, micro, 2});
  ASSERT_TRUE(programs.ok());
  std::map<std::pair<int, int>, std::string> tracks;  // (pid, tid) -> name
  for (const auto& e : json.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      tracks[{e.at("pid").get<int>(), e.at("tid").get<int>()}] = e.at("args").at("name");
  for (int rank = 0; rank < stages; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::vector<std::string> expected;
    for (const pipeline::Action& a : (*programs)[static_cast<std::size_t>(rank)])
      if (pipeline::is_compute(a.op))
        expected.push_back(fmt::format("{} {}.{}", pipeline::op_name(a.op), a.micro, a.chunk));
    // The last step too: the engine waits for the last work items' spans before it writes.
    for (int step = 0; step < 4; ++step) {
      std::vector<std::pair<double, std::string>> ran;  // (start, "forward MICRO.CHUNK")
      for (const auto& e : json.at("traceEvents")) {
        if (e.at("ph") != "X" || e.at("pid") != rank ||
            tracks[{rank, e.at("tid").get<int>()}] != "stream compute")
          continue;
        const std::string name = e.at("name");
        const std::string prefix = std::to_string(step) + ".";
        const auto space = name.find(' ');
        if (space == std::string::npos || name.compare(space + 1, prefix.size(), prefix) != 0) continue;
        ran.emplace_back(e.at("ts").get<double>(),
                         name.substr(0, space + 1) + name.substr(space + 1 + prefix.size()));
      }
      std::sort(ran.begin(), ran.end());
      std::vector<std::string> order;
      for (const auto& [start, what] : ran) order.push_back(what);
      EXPECT_EQ(order, expected) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace troupe
