// The jobs of configs/, which users copy: every file there is a job that `troupe check`
// accepts and that says what it is for in its first lines, or a cluster file the simulator
// runs a job on; each job that fits this machine trains a few steps to finite losses. A job
// on prepared data names the command that prepares it in its first lines ("#   python
// scripts/prepare_data.py ..."), which runs first, with the project's Python.
#include <gtest/gtest.h>

#include <dirent.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

const std::string kConfigs = std::string(TROUPE_SOURCE_DIR) + "/configs";

struct GalleryFile {
  std::string path;  ///< under configs/
  bool cluster;      ///< a simulator's cluster file, not a job
};

std::vector<GalleryFile> gallery(const std::string& folder = "") {
  std::vector<GalleryFile> files;
  DIR* dir = opendir((kConfigs + folder).c_str());
  if (dir == nullptr) return files;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string relative = folder + "/" + name;
    if (entry->d_type == DT_DIR) {
      for (GalleryFile& f : gallery(relative)) files.push_back(std::move(f));
    } else {
      const std::string text = testing::read_file(kConfigs + relative);
      files.push_back({relative.substr(1), text.find("\n[links.") != std::string::npos});
    }
  }
  closedir(dir);
  return files;
}

// A folder to check and run `file` from (its relative paths are relative to it), with its
// data prepared when its first lines say how.
std::string workspace_for(const GalleryFile& file) {
  const std::string dir = testing::make_temp_dir();
  std::istringstream lines(testing::read_file(kConfigs + "/" + file.path));
  const std::string prepare = "#   python scripts/prepare_data.py ";
  for (std::string line; std::getline(lines, line) && line.rfind("#", 0) == 0;) {
    if (line.rfind(prepare, 0) != 0) continue;
    const std::string source = TROUPE_SOURCE_DIR;
    auto made = testing::run_command("cd " + dir + " && ln -s " + source + "/docs docs && ln -s " + source +
                                         "/scripts scripts && " + TROUPE_TORCH_PYTHON + " " +
                                         line.substr(std::string("#   python ").size()),
                                     300);
    EXPECT_EQ(made.exit_code, 0) << line << "\n" << made.output;
  }
  return dir;
}

bool is_json(const std::string& path) {
  return path.size() > 5 && path.substr(path.size() - 5) == ".json";
}

// DeepSpeed takes the world size from its launcher; a ds_config.json leaves it to --set.
// The simulator's jobs (configs/sim/) are written for a cluster, not for this machine.
std::string world_of(const std::string& path) {
  if (path.rfind("sim/", 0) == 0) return " --not-here";
  return is_json(path) ? " --set cluster.world_size=2" : "";
}

int world_size_of(const std::string& path, const std::string& dir) {
  auto r = testing::run_command("cd " + dir + " && " + TROUPE_BINARY + " check " + kConfigs + "/" + path +
                                world_of(path));
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("world_size = ", 0) == 0) return std::stoi(line.substr(13));
  return 0;
}

TEST(Gallery, EveryJobIsCheckedAndSaysWhatItIsFor) {
  int jobs = 0;
  for (const GalleryFile& file : gallery()) {
    if (file.cluster) continue;
    SCOPED_TRACE(file.path);
    ++jobs;
    const std::string text = testing::read_file(kConfigs + "/" + file.path);
    if (is_json(file.path)) {
      auto json = nlohmann::ordered_json::parse(text);  // in the file's order
      ASSERT_TRUE(json.is_object());
      EXPECT_EQ(json.begin().key(), "_comment") << "a DeepSpeed config says what it is for in its first key";
    } else {
      EXPECT_EQ(text.rfind("# ", 0), 0u) << "a job says what it is for in its first lines";
    }
    auto r = testing::run_command("cd " + workspace_for(file) + " && " + TROUPE_BINARY + " check " +
                                      kConfigs + "/" + file.path + world_of(file.path),
                                  60);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
  }
  EXPECT_GE(jobs, 6);
}

// A cluster file names, in its first lines, the command that runs a job on it (`troupe
// simulate` or `troupe plan`); that command runs, from a folder of its own.
TEST(Gallery, EveryClusterFileRunsTheCommandItNames) {
  int clusters = 0;
  for (const GalleryFile& file : gallery()) {
    if (!file.cluster) continue;
    SCOPED_TRACE(file.path);
    ++clusters;
    std::istringstream lines(testing::read_file(kConfigs + "/" + file.path));
    std::string command;
    for (std::string line; std::getline(lines, line) && line.rfind("#", 0) == 0;)
      if (line.find("#   troupe ") == 0 && line.find("--cluster configs/" + file.path) != std::string::npos)
        command = line.substr(std::string("#   troupe ").size());
    ASSERT_FALSE(command.empty()) << "its first lines name no command that runs a job on it";
    const std::string dir = testing::make_temp_dir();
    auto r = testing::run_command(
        "cd " + dir + " && ln -s " + kConfigs + " configs && " + TROUPE_BINARY + " " + command, 300);
    EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  }
  EXPECT_GE(clusters, 2);
}

// The jobs of up to 8 ranks train 3 steps each, from a folder of their own (their nvme and
// checkpoint folders are relative to it), with a checkpoint every 2 steps where they save.
TEST(Gallery, EachJobThatFitsThisMachineTrainsAFewSteps) {
  int trained = 0;
  for (const GalleryFile& file : gallery()) {
    if (file.cluster) continue;
    const std::string dir = workspace_for(file);
    const int world = world_size_of(file.path, dir);
    if (world < 1 || world > 8) continue;
    SCOPED_TRACE(file.path);
    ++trained;
    const std::string saves =
        testing::read_file(kConfigs + "/" + file.path).find("every_steps") != std::string::npos
            ? " --set checkpoint.every_steps=2"
            : "";
    auto r = testing::run_command(
        "cd " + dir + " && " + TROUPE_BINARY + " run " + kConfigs + "/" + file.path + world_of(file.path) +
            saves + " --set train.steps=3 --set train.log_interval=1 --set cluster.coordinator=" +
            testing::free_coordinator() + " --metrics " + dir + "/metrics.jsonl",
        300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::istringstream lines(testing::read_file(dir + "/metrics.jsonl"));
    int steps = 0;
    for (std::string line; std::getline(lines, line); ++steps)
      EXPECT_TRUE(std::isfinite(nlohmann::json::parse(line).at("loss").get<double>())) << line;
    EXPECT_EQ(steps, 3) << r.output;
    if (!saves.empty()) {
      EXPECT_EQ(testing::run_command("ls -d " + dir + "/checkpoints/*/step-00000002").exit_code, 0)
          << r.output;
    }
  }
  EXPECT_GE(trained, 6);
}

}  // namespace
}  // namespace troupe
