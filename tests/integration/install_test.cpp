// `make install` gives an outside project everything it needs: examples/embed is
// configured and built against a temporary prefix with find_package(troupe), and
// trains its own model on 2 ranks to a falling loss; the installed troupe finds troupe-core.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

TEST(Install, OutsideProjectBuildsAgainstTheInstalledPackageAndTrainsOnTwoRanks) {
  std::string dir = testing::make_temp_dir();
  std::string prefix = dir + "/prefix";
  auto installed =
      testing::run_command(std::string("cmake --install ") + TROUPE_BUILD_DIR + " --prefix " + prefix, 120);
  ASSERT_EQ(installed.exit_code, 0) << installed.output;

  std::string build = dir + "/embed-build";
  auto built = testing::run_command(std::string("cmake -S ") + TROUPE_SOURCE_DIR + "/examples/embed -B " +
                                        build + " -G Ninja -DCMAKE_PREFIX_PATH=" + prefix +
                                        " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache && cmake --build " + build,
                                    480);
  ASSERT_EQ(built.exit_code, 0) << built.output;

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

}  // namespace
}  // namespace troupe
