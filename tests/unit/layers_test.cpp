// The folders include each other only down the layers (base <- ... <- runtime <- sim <-
// tools), with no cycle between folders: scripts/check_layers.py over the source tree, and
// its self-test, which shows that it reports a library file including a tool's and a cycle.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace troupe
