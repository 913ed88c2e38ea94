// `make install` gives an outside project everything it needs: examples/embed is
// configured and built against a temporary prefix with find_package(troupe), and
// trains its own model on 2 ranks to a falling loss, rank 0's engine writing [monitor]'s
// CSV and TensorBoard files of every step; the installed troupe finds troupe-core.
// examples/scheduler, built the same way, registers pipeline schedulers troupe does not
// build in (one of each kind) and trains the GPT with them, step for step like the
// single-process reference.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/pipeline_job.hpp"

namespace troupe {
namespace {

// The installed package, once per test program, under a temporary prefix.
const std::string& installed_prefix() {
  static const std::string prefix = [] {
    std::string p = testing::make_temp_dir() + "/prefix";
    auto installed =
        testing::run_command(std::string("cmake --install ") + TROUPE_BUILD_DIR + " --prefix " + p, 120);
    EXPECT_EQ(installed.exit_code, 0) << installed.output;
    return p;
  }();
  return prefix;
}

// examples/`name` built against the installed package; the build folder, or "" on failure.
std::string build_example(const std::string& name) {
  std::string build = testing::make_temp_dir() + "/" + name + "-build";
  auto built =
      testing::run_command(std::string("cmake -S ") + TROUPE_SOURCE_DIR + "/examples/" + name + " -B " +
                               build + " -G Ninja -DCMAKE_PREFIX_PATH=" + installed_prefix() +
                               " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache && cmake --build " + build,
                           480);
  EXPECT_EQ(built.exit_code, 0) << built.output;
  return built.exit_code == 0 ? build : "";
}

// A loss as the example prints it.
std::string fmt_loss(double loss) {
  char text[32];
  std::snprintf(text, sizeof text, "%.5f", loss);
  return text;
}

// A DeepSpeed-style CSV file's rows (step, value), in the file's order.
std::vector<std::pair<int64_t, double>> csv_rows(const std::string& path) {
  std::vector<std::pair<int64_t, double>> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // the header
  long long step = 0;
  double value = 0;
  while (std::getline(in, line))
    if (std::sscanf(line.c_str(), "%lld,%lf", &step, &value) == 2) rows.emplace_back(step, value);
  return rows;
}

TEST(Install, OutsideProjectBuildsAgainstTheInstalledPackageAndTrainsOnTwoRanks) {
  const std::string& prefix = installed_prefix();
  std::string build = build_example("embed");
  ASSERT_FALSE(build.empty());

  const std::string monitors = testing::make_temp_dir();
  auto trained = testing::run_command(
      prefix + "/bin/troupe launch --ranks 2 -- " + build + "/embed_trainer " + TROUPE_SOURCE_DIR +
          "/examples/embed/job.toml cluster.coordinator=" + testing::free_coordinator() +
          " monitor.csv=" + monitors + "/csv monitor.tensorboard=" + monitors + "/tb",
      180);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(trained.output, m, std::regex(R"(rank 0 of 2: loss ([0-9.]+) -> ([0-9.]+))")))
      << trained.output;
  EXPECT_LT(std::stod(m[2]), 0.5 * std::stod(m[1])) << trained.output;

  // The engine's monitor: a row a step, each the loss the trainer printed at that step.
  const auto losses = csv_rows(monitors + "/csv/train_loss.csv");
  ASSERT_EQ(losses.size(), 60u) << trained.output;
  for (std::size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i].first, static_cast<int64_t>(i) + 1);
  EXPECT_EQ(fmt_loss(losses.back().second), m[2].str());
  const std::regex printed(R"(step ([0-9]+) loss ([0-9.]+))");
  int compared = 0;
  for (auto it = std::sregex_iterator(trained.output.begin(), trained.output.end(), printed);
       it != std::sregex_iterator(); ++it, ++compared)
    EXPECT_EQ(fmt_loss(losses.at(std::stoull((*it)[1]) - 1).second), (*it)[2].str()) << "step " << (*it)[1];
  EXPECT_EQ(compared, 6) << trained.output;
  EXPECT_EQ(csv_rows(monitors + "/csv/perf_step_ms.csv").size(), 60u);
  EXPECT_FALSE(std::filesystem::exists(monitors + "/csv/perf_mfu.csv"));  // no Trainable::step_flops
  int event_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(monitors + "/tb"))
    event_files +=
        entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && entry.file_size() > 0;
  EXPECT_EQ(event_files, 1);

  // The installed troupe finds its troupe-core (libexec/troupe) for what needs LibTorch.
  auto bench = testing::run_command(prefix + "/bin/troupe bench adam --params 4096 --iters 1 --json", 60);
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("\"params\":4096"), std::string::npos) << bench.output;
}

// The example's schedulers (2 micro-batches of activations per stage at most), the one
// that plans the step (budget_greedy) and the one that decides from events (budget_events),
// train the GPT like the reference, at pp 2 and 4, m 4 and 8, dp 1 and 2, ZeRO 0-3.
TEST(Install, ATrainersOwnSchedulerTrainsLikeTheReference) {
  std::string build = build_example("scheduler");
  ASSERT_FALSE(build.empty());
  const std::vector<testing::PipelineJob> jobs = {
      {2, 1, 4, "budget_greedy", 0, 0, ""}, {4, 1, 8, "budget_greedy", 0, 0.5, ""},
      {2, 2, 8, "budget_greedy", 1, 0, ""}, {2, 2, 4, "budget_greedy", 2, 0.5, ""},
      {2, 2, 4, "budget_greedy", 3, 0, ""}, {2, 1, 8, "budget_events", 0, 0.5, ""},
      {4, 1, 4, "budget_events", 0, 0, ""}, {2, 2, 4, "budget_events", 1, 0.5, ""},
      {2, 2, 8, "budget_events", 2, 0, ""}, {2, 2, 4, "budget_events", 3, 0.5, ""},
  };
  for (const auto& j : jobs) {
    SCOPED_TRACE(testing::describe(j));
    std::string dir = testing::make_temp_dir();
    auto r = testing::run_command(installed_prefix() + "/bin/troupe launch --ranks " +
                                      std::to_string(j.pp * j.dp) + " -- " + build + "/scheduler_trainer " +
                                      TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
                                      testing::joined(testing::pipeline_overrides(j), " ") + " --metrics " +
                                      dir + "/metrics.jsonl --parameters-out " + dir + "/parameters.bin",
                                  300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto run = testing::read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
    auto worst = testing::expect_parity(run, testing::pipeline_reference(j.clip, j.tied), 20, j.clip);
    std::printf(
        "scheduler example parity: %s: worst loss %.2e relative, gradient norm %.2e, parameters %.2e\n",
        testing::describe(j).c_str(), worst.loss, worst.grad_norm, worst.parameters);
  }
}

}  // namespace
}  // namespace troupe
