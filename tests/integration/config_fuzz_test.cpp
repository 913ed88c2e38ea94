// A config fuzz: the default job's file, mutated many ways (values of every type and size
// swapped in, keys added, lines dropped, doubled or cut, bytes of garbage), through
// `troupe check`, and the mutants it accepts through a short `troupe run`. Whatever the
// file says, troupe answers with a sentence and an exit status: never a signal, an abort,
// a backtrace or a hang. Seeded: a failure prints the seed and the mutant.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

constexpr unsigned kSeed = 20261201;
constexpr int kMutants = 300;
constexpr int kRunsMax = 6;

const std::vector<std::string> kValues = {"-1",
                                          "0",
                                          "1",
                                          "2",
                                          "3",
                                          "7",
                                          "1e308",
                                          "-1e308",
                                          "nan",
                                          "inf",
                                          "-inf",
                                          "0.5",
                                          "1e-320",
                                          "9223372036854775807",
                                          "-9223372036854775808",
                                          "4294967297",
                                          "65537",
                                          "1048577",
                                          "\"\"",
                                          "\"x\"",
                                          "\"none\"",
                                          "\"nvme\"",
                                          "\"cuda\"",
                                          "\"127.0.0.1:1\"",
                                          "\"[::1]:0\"",
                                          "[1, 2]",
                                          "[0.9]",
                                          "[]",
                                          "true",
                                          "false",
                                          "{}",
                                          "{ a = 1 }",
                                          "1979-05-27",
                                          "\"" + std::string(3000, 'z') + "\""};

struct Key {
  std::string section, key;
};

// Every key the resolved default job has, from `troupe check`'s listing of them.
std::vector<Key> every_key(const std::string& rendered) {
  std::vector<Key> keys;
  std::string section;
  std::istringstream lines(rendered);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 2 && line.front() == '[') section = line.substr(1, line.find(']') - 1);
    auto equals = line.find(" = ");
    if (!section.empty() && equals != std::string::npos && line.front() != '#')
      keys.push_back({section, line.substr(0, equals)});
  }
  return keys;
}

class Mutator {
 public:
  Mutator(std::string base, std::vector<Key> keys) : base_(std::move(base)), keys_(std::move(keys)) {}

  std::string operator()() {
    std::vector<std::string> lines = split(base_);
    int edits = 1 + pick(3);
    for (int e = 0; e < edits; ++e) mutate(lines);
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    if (pick(10) == 0)
      text = text.substr(0, static_cast<std::size_t>(pick(static_cast<int>(text.size()) + 1)));
    return text;
  }

 private:
  static std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(random_); }
  const std::string& value() {
    return kValues[static_cast<std::size_t>(pick(static_cast<int>(kValues.size())))];
  }

  void mutate(std::vector<std::string>& lines) {
    const std::size_t at = static_cast<std::size_t>(pick(static_cast<int>(lines.size())));
    switch (pick(6)) {
      case 0: {  // a value swapped
        auto equals = lines[at].find('=');
        if (equals != std::string::npos) lines[at] = lines[at].substr(0, equals + 1) + " " + value();
        break;
      }
      case 1:
      case 2: {  // any key of any section set to any value
        const Key& k = keys_[static_cast<std::size_t>(pick(static_cast<int>(keys_.size())))];
        lines.push_back("[" + k.section + "]");
        lines.push_back(k.key + " = " + value());
        break;
      }
      case 3:
        lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(at));
        break;
      case 4:
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), lines[at]);
        break;
      default: {  // bytes of garbage
        std::string junk;
        for (int i = 0, n = 1 + pick(12); i < n; ++i) junk += static_cast<char>(1 + pick(255));
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), junk);
      }
    }
    if (lines.empty()) lines.push_back("");
  }

  std::string base_;
  std::vector<Key> keys_;
  std::mt19937 random_{kSeed};
};

// An answer, not a crash: exit 0, 1 or 2, and no sign of an abort in what it printed.
void expect_an_answer(const testing::CommandResult& r, const std::string& what, const std::string& mutant) {
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2)
      << what << " exited " << r.exit_code << " (seed " << kSeed << ") on:\n"
      << mutant << "\n---\n"
      << r.output;
  for (const char* sign :
       {"terminate called", "Aborted", "backtrace", "Exception raised from", "Segmentation"})
    EXPECT_EQ(r.output.find(sign), std::string::npos) << what << " on:\n" << mutant << "\n---\n" << r.output;
}

TEST(ConfigFuzz, EveryMutantGetsASentenceNeverACrashOrAHang) {
  const std::string base = testing::read_file(std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-gpt.toml");
  auto listing = testing::run_command(std::string(TROUPE_BINARY) + " check " + TROUPE_SOURCE_DIR +
                                      "/configs/tiny-gpt.toml");
  ASSERT_EQ(listing.exit_code, 0) << listing.output;
  std::vector<Key> keys = every_key(listing.output);
  ASSERT_GT(keys.size(), 40u) << listing.output;

  Mutator mutate(base, keys);
  const std::string dir = testing::make_temp_dir();
  int accepted = 0, runs = 0;
  for (int i = 0; i < kMutants; ++i) {
    const std::string mutant = mutate();
    const std::string file = dir + "/mutant.toml";
    testing::write_file(file, mutant);
    auto checked = testing::run_command(std::string(TROUPE_BINARY) + " check " + file, 30);
    expect_an_answer(checked, "troupe check", mutant);
    if (checked.exit_code != 0) continue;
    ++accepted;
    if (runs >= kRunsMax) continue;
    ++runs;
    auto ran = testing::run_command(std::string(TROUPE_BINARY) + " run " + file +
                                        " --set train.steps=2 --set cluster.bootstrap_timeout_s=20" +
                                        " --set cluster.coordinator=" + testing::free_coordinator(),
                                    120);
    expect_an_answer(ran, "troupe run", mutant);
  }
  std::printf("config fuzz: %d mutants, %d accepted by check, %d run (seed %u)\n", kMutants, accepted, runs,
              kSeed);
}

}  // namespace
}  // namespace troupe
