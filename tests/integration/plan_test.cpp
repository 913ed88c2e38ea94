// `troupe plan` as a user meets it: a progress line on a terminal (a pseudo-terminal made by
// script(1)), none into a pipe or with --json; its options' bad values refused naming the
// option; a cluster no layout fits answered with one sentence.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/command.hpp"

namespace troupe {
namespace {

std::string plan_command(const std::string& options) {
  return std::string(TROUPE_BINARY) + " plan " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml --cluster " +
         TROUPE_SOURCE_DIR + "/configs/sim/h100-1x8.toml --out " + testing::make_temp_dir() + "/plan.toml" +
         options;
}

// `command` run with its standard streams on a pseudo-terminal.
testing::CommandResult on_a_terminal(const std::string& command) {
  return testing::run_command("script -qec \"" + command + "\" /dev/null", 120);
}

TEST(PlanCommand, ShowsItsProgressOnATerminalOnly) {
  auto shown = on_a_terminal(plan_command(""));
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_NE(shown.output.find("\rplan: 217 layouts, "), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find(" simulated "), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("the best 5:"), std::string::npos) << shown.output;

  auto piped = testing::run_command(plan_command(""), 120);
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_EQ(piped.output.find("plan: "), std::string::npos) << piped.output;

  auto json = on_a_terminal(plan_command(" --json"));
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(json.output.find("plan: "), std::string::npos) << json.output;
  auto parsed = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json.output;
  EXPECT_EQ(parsed["considered"], 217);
  EXPECT_EQ(parsed["considered"].get<int>(),
            static_cast<int>(parsed["ranked"].size() + parsed["refused"].size() + parsed["pruned"].size()));
  EXPECT_GT(parsed["pruned"].size(), parsed["ranked"].size()) << "most layouts are not simulated";
}

TEST(PlanCommand, BadOptionValuesAreRefusedNamingTheOption) {
  for (const char* bad : {" --budget-seconds 0", " --budget-seconds -5", " --simulate-top 0"}) {
    auto r = testing::run_command(plan_command(bad), 60);
    EXPECT_NE(r.exit_code, 0) << bad << ": " << r.output;
    EXPECT_LT(r.exit_code, 128) << bad << ": " << r.output;
    const std::string option = std::string(bad).substr(1, std::string(bad).find(' ', 1) - 1);
    EXPECT_NE(r.output.find(option), std::string::npos) << bad << ": " << r.output;
  }
}

TEST(PlanCommand, AClusterNoLayoutFitsIsAnsweredInOneSentence) {
  const std::string dir = testing::make_temp_dir();
  testing::write_file(dir + "/small.toml",
                      "[cluster]\nhosts = 1\nranks_per_host = 2\ndevice = \"h100-sxm\"\ncompute = \"flops\"\n"
                      "[links.host]\nbandwidth_gbs = 450\nlatency_us = 3\n");
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " plan " + TROUPE_SOURCE_DIR +
                                    "/configs/sim/gpt-70b.toml --cluster " + dir + "/small.toml --out " +
                                    dir + "/plan.toml",
                                120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no layout fits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the smallest any needs is "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a rank has 80.00 GB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("more ranks"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace troupe
