// The first page and the getting-started guide cannot go stale: every `sh` block of
// docs/GETTING-STARTED.md runs, in order, from one fresh folder holding a link to
// configs/, with build/ first on the path; the README's blocks run too (`make run` as what
// the Makefile's run target runs, `make test` being CI's own command); each command the
// README lists is run by one of those blocks; each "yes" of the README's feature table
// links a test file that exists and is built; the README's minimal job trains; and the README
// stays a first page.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

std::string source(const std::string& path) {
  return std::string(TROUPE_SOURCE_DIR) + "/" + path;
}

struct FencedBlock {
  int line = 0;  ///< where the block's first command is
  std::string text;
};

// The ```sh blocks of a markdown file, or those of another fence (```toml).
std::vector<FencedBlock> fenced_blocks(const std::string& markdown, const std::string& fence = "```sh") {
  std::vector<FencedBlock> blocks;
  std::istringstream in(testing::read_file(source(markdown)));
  bool inside = false;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (!inside && line == fence) {
      inside = true;
      blocks.push_back({number + 1, ""});
    } else if (inside && line == "```") {
      inside = false;
    } else if (inside) {
      blocks.back().text += line + "\n";
    }
  }
  return blocks;
}

// A folder to run the documents' commands from: configs/, docs/ and scripts/ linked in, and
// a `troupe` first on the path that runs the build's with a free coordinator port for `run`
// (the jobs name 29500; tests run in parallel).
std::string document_workspace(std::string& bin) {
  const std::string dir = testing::make_temp_dir();
  bin = dir + "/bin";
  for (const char* linked : {"configs", "docs", "scripts"})
    EXPECT_EQ(testing::run_command("ln -s " + source(linked) + " " + dir + "/" + linked).exit_code, 0);
  EXPECT_EQ(testing::run_command("mkdir " + bin).exit_code, 0);
  testing::write_file(bin + "/troupe",
                      "#!/bin/sh\nif [ \"$1\" = run ]; then exec " + std::string(TROUPE_BINARY) +
                          " \"$@\" --set cluster.coordinator=" + testing::free_coordinator() + "; fi\nexec " +
                          TROUPE_BINARY + " \"$@\"\n");
  EXPECT_EQ(testing::run_command("chmod +x " + bin + "/troupe").exit_code, 0);
  return dir;
}

testing::CommandResult run_block(const std::string& dir, const std::string& bin, const std::string& text) {
  testing::write_file(dir + "/block.sh", "set -e\n" + text);
  return testing::run_command("cd " + dir + " && PATH=" + bin + ":$PATH sh -x block.sh", 600);
}

TEST(Docs, EveryCommandOfTheGettingStartedGuideRunsInOrder) {
  ASSERT_GE(fenced_blocks("docs/GETTING-STARTED.md").size(), 8u);
  std::string bin;
  const std::string dir = document_workspace(bin);
  std::string said;
  for (const FencedBlock& block : fenced_blocks("docs/GETTING-STARTED.md")) {
    SCOPED_TRACE("docs/GETTING-STARTED.md:" + std::to_string(block.line));
    auto r = run_block(dir, bin, block.text);
    ASSERT_EQ(r.exit_code, 0) << block.text << "\n" << r.output;
    said += r.output;
  }
  // What the guide says its commands do and leave behind.
  for (const char* made : {"metrics.jsonl", "reference.jsonl", "gpt.pt", "trace.json", "plan.toml"})
    EXPECT_EQ(testing::run_command(std::string("test -s ") + dir + "/" + made).exit_code, 0) << made;
  auto kept = testing::run_command("ls " + dir + "/checkpoints");
  EXPECT_EQ(kept.output, "step-00000040\nstep-00000060\n");
  EXPECT_NE(said.find("resumed from checkpoints/step-00000060 after step 60"), std::string::npos) << said;
  EXPECT_NE(said.find("step 100/100"), std::string::npos) << said;
  EXPECT_NE(said.find("refused with exit status 2"), std::string::npos) << said;
  EXPECT_NE(said.find("[zero] stage must be one of 0, 1, 2 or 3, got 5"), std::string::npos) << said;
}

// `make run` is the Makefile's `$(BUILD)/troupe run $(CONFIG)` after the build: the default
// job, run here as it is; `make test` is what CI runs (.ci/run).
TEST(Docs, EveryCommandOfTheReadmeRuns) {
  const std::string makefile = testing::read_file(source("Makefile"));
  ASSERT_NE(makefile.find("CONFIG ?= configs/tiny-gpt.toml"), std::string::npos);
  ASSERT_NE(makefile.find("$(BUILD)/troupe run $(CONFIG)"), std::string::npos);
  ASSERT_NE(testing::read_file(source(".ci/run")).find("make test"), std::string::npos);
  std::string bin;
  const std::string dir = document_workspace(bin);
  for (const FencedBlock& block : fenced_blocks("README.md")) {
    std::string text = block.text;
    text = std::regex_replace(text, std::regex("^make run( .*)?$", std::regex::multiline),
                              "troupe run configs/tiny-gpt.toml");
    text = std::regex_replace(text, std::regex("^make test( .*)?$", std::regex::multiline), "");
    SCOPED_TRACE("README.md:" + std::to_string(block.line));
    auto r = run_block(dir, bin, text);
    ASSERT_EQ(r.exit_code, 0) << text << "\n" << r.output;
    EXPECT_NE(r.output.find("step 600"), std::string::npos) << "the default job trains its 600 steps\n"
                                                            << r.output;
  }
}

// Each command in the README's list ("- `troupe NAME ...`") is run by a block of the guide.
TEST(Docs, EveryCommandTheReadmeListsIsRunByTheGuide) {
  std::string guide;
  for (const FencedBlock& block : fenced_blocks("docs/GETTING-STARTED.md")) guide += block.text;
  std::istringstream readme(testing::read_file(source("README.md")));
  const std::regex listed("^- `troupe ([a-z-]+)");
  // Run elsewhere: rank and launch start ranks of other programs (offload_test,
  // install_test), profile-device measures for minutes (profile_test), bench starts ranks
  // of its own (bench_test).
  const std::vector<std::string> elsewhere = {"rank", "launch", "profile-device", "bench"};
  int commands = 0;
  for (std::string line; std::getline(readme, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, listed)) continue;
    ++commands;
    const std::string name = m[1];
    if (std::find(elsewhere.begin(), elsewhere.end(), name) != elsewhere.end()) continue;
    EXPECT_NE(guide.find("troupe " + name + " "), std::string::npos) << name << " is listed but not run";
  }
  EXPECT_GE(commands, 10);
}

// A row that says "yes" names its test; the file exists and tests/CMakeLists.txt makes it a
// test (a GoogleTest program, or a script run by add_test).
TEST(Docs, EveryWorksInTheReadmeTablePointsAtItsTest) {
  std::istringstream readme(testing::read_file(source("README.md")));
  const std::string cmake = testing::read_file(source("tests/CMakeLists.txt"));
  const std::regex link(R"(\[([a-z_]+)\]\(((tests/[a-z_/]+\.cpp)|(scripts/[a-z_-]+\.sh))\))");
  int rows = 0;
  for (std::string line; std::getline(readme, line);) {
    if (line.rfind("| ", 0) != 0 || line.find("| yes |") == std::string::npos) continue;
    ++rows;
    int links = 0;
    for (std::sregex_iterator it(line.begin(), line.end(), link), end; it != end; ++it) {
      ++links;
      const std::string name = (*it)[1], file = (*it)[2];
      EXPECT_EQ(testing::run_command("test -f " + source(file)).exit_code, 0) << file << " in: " << line;
      const bool program = cmake.find("troupe_test(" + name + " ") != std::string::npos &&
                           cmake.find(file.substr(6)) != std::string::npos;
      const bool script = cmake.find("add_test(NAME " + name + " ") != std::string::npos &&
                          cmake.find(file) != std::string::npos;
      EXPECT_TRUE(program || script) << name << " (" << file << ") is not a test of tests/CMakeLists.txt";
    }
    EXPECT_GE(links, 1) << "a claim without its test: " << line;
  }
  EXPECT_GE(rows, 10);
}

// The README's minimal job is one troupe accepts, and trains.
TEST(Docs, TheReadmesMinimalJobTrains) {
  const auto jobs = fenced_blocks("README.md", "```toml");
  ASSERT_EQ(jobs.size(), 1u);
  const std::string dir = testing::make_temp_dir();
  testing::write_file(dir + "/job.toml", jobs[0].text);
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " run " + dir + "/job.toml --set train.steps=3" +
                                    " --set cluster.coordinator=" + testing::free_coordinator(),
                                120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 3/3"), std::string::npos) << r.output;
}

TEST(Docs, TheReadmeIsAFirstPage) {
  std::istringstream readme(testing::read_file(source("README.md")));
  int lines = 0;
  for (std::string line; std::getline(readme, line);) ++lines;
  EXPECT_LE(lines, 130);
}

}  // namespace
}  // namespace troupe
