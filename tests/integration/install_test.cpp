// `make install` gives an outside project everything it needs: examples/embed is
// configured and built against a temporary prefix with find_package(troupe), and
// trains its own model on 2 ranks to a falling loss; the installed troupe finds troupe-core.
// examples/scheduler, built the same way, registers pipeline schedulers troupe does not
// build in (one of each kind) and trains the GPT with them, step for step like the
// single-process reference.
#include <gtest/gtest.h>

#include <regex>
#include <string>

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

TEST(Install, OutsideProjectBuildsAgainstTheInstalledPackageAndTrainsOnTwoRanks) {
  const std::string& prefix = installed_prefix();
  std::string build = build_example("embed");
  ASSERT_FALSE(build.empty());

  auto trained = testing::run_command(
      prefix + "/bin/troupe launch --ranks 2 -- " + build + "/embed_trainer " + TROUPE_SOURCE_DIR +
          "/examples/embed/job.toml cluster.coordinator=" + testing::free_coordinator(),
      180);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(trained.output, m, std::regex(R"(rank 0 of 2: loss ([0-9.]+) -> ([0-9.]+))")))
      << trained.output;
  EXPECT_LT(std::stod(m[2]), 0.5 * std::stod(m[1])) << trained.output;

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
