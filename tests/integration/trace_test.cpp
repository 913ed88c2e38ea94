// Tracing: a 2-rank run writes one Chrome-trace/Perfetto timeline with a process per
// rank and a thread track per actor and stream.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/command.hpp"

namespace troupe {
namespace {

TEST(Trace, TwoRanksMergeIntoOneTimelineWithTracksPerActorAndStream) {
  std::string dir = testing::make_temp_dir();
  std::string trace = dir + "/trace.json";
  auto r = testing::run_command(
      std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR +
      "/configs/tiny-gpt.toml --set train.steps=3 --set cluster.coordinator=127.0.0.1:29751" +
      " --set trace.path=" + trace);
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
  for (const char* track : {"stream compute", "stream data", "comm", "stage", "step_driver", "comm_agent"})
    EXPECT_TRUE(tracks.count(track)) << track;
  EXPECT_EQ(ranks_with_spans, (std::set<int>{0, 1}));
  EXPECT_NE(r.output.find(trace), std::string::npos) << "the summary names the trace: " << r.output;
}

}  // namespace
}  // namespace troupe
