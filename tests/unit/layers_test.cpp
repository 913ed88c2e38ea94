// The folders include each other only down the layers (base <- ... <- runtime <- sim <-
// tools), with no cycle between folders: scripts/check_layers.py over the source tree, and
// its self-test, which shows that it reports a library file including a tool's and a cycle.
// The ZeRO stage is decided once: scripts/count_zero_branches.py finds no comparison of a
// stage number outside memory/zero_policy.hpp, and finds the ones planted in a tree.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/integration/command.hpp"

namespace troupe {
namespace {

std::string checker() {
  return std::string("python3 ") + TROUPE_SOURCE_DIR + "/scripts/check_layers.py";
}

TEST(Layers, IncludesGoDownTheLayersWithoutACycle) {
  auto r = testing::run_command(checker() + " " + TROUPE_SOURCE_DIR, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all down the layers, no cycle"), std::string::npos) << r.output;
}

TEST(Layers, TheCheckReportsAToolIncludedByTheLibraryAndACycle) {
  auto r = testing::run_command(checker() + " --self-test", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

std::string zero_counter() {
  return std::string("python3 ") + TROUPE_SOURCE_DIR + "/scripts/count_zero_branches.py --list";
}

TEST(ZeroStage, IsDecidedOnlyByThePolicy) {
  auto r = testing::run_command(zero_counter() + " " + TROUPE_SOURCE_DIR, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "0\n") << "decide through ZeroPolicy (memory/zero_policy.hpp) instead:\n" << r.output;
}

TEST(ZeroStage, TheCountFindsABranchOnAStageNumber) {
  std::string root = testing::make_temp_dir();
  for (const char* folder : {"actors", "sim"}) testing::run_command("mkdir -p " + root + "/" + folder, 10);
  std::ofstream(root + "/actors/planted.cpp") << "if (store.stage() == 2) return;\nint stage = 0;\n";
  std::ofstream(root + "/sim/planted.cpp")
      << "bool partitioned = job.zero.stage >= 1;  // stage == 3 in a comment\n";
  auto r = testing::run_command(zero_counter() + " " + root, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("actors/planted.cpp:1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sim/planted.cpp:1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n2\n"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace troupe
