// The checkpoint folder's contract: a checkpoint exists once its manifest is in place; a
// partly written one is never the latest; loading names a missing, short or corrupted
// file; a full disk fails the save naming the path and leaves the previous checkpoint;
// keep_last never removes the only complete checkpoint.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "memory/checkpoint_dir.hpp"
#include "memory/uring_file.hpp"
#include "tests/support/memory_mount.hpp"
#include "tests/support/temp_dir.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

std::string temp_root() {
  return testing::make_temp_dir("troupe-ckpt-");
}

// A checkpoint of `step` with two files of `size` bytes whose contents depend on the step.
Result<std::string> save(const std::string& root, int64_t step, std::size_t size = 4096) {
  auto staging = begin_checkpoint(root, step);
  if (!staging) return staging.error();
  CheckpointManifest m;
  m.step = step;
  m.meta = R"({"dp": 2})";
  for (int f = 0; f < 2; ++f) {
    std::vector<char> bytes(size, static_cast<char>(step * 3 + f));
    auto written =
        write_checkpoint_file(*staging, "rank" + std::to_string(f) + ".bin", bytes.data(), bytes.size());
    if (!written) return written.error();
    m.files.push_back(*written);
  }
  TROUPE_TRY(commit_checkpoint(root, m));
  return (fs::path(root) / checkpoint_name(step)).string();
}

TEST(CheckpointDir, ACommittedCheckpointOpensWithItsManifest) {
  const std::string root = temp_root();
  auto saved = save(root, 10);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(fs::path(*saved).filename(), "step-00000010");
  auto opened = open_checkpoint(*saved);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ(opened->step, 10);
  ASSERT_EQ(opened->files.size(), 2u);
  EXPECT_EQ(opened->files[1].name, "rank1.bin");
  EXPECT_EQ(opened->files[1].bytes, 4096u);
  EXPECT_EQ(opened->meta, R"({"dp":2})");
  auto latest = latest_checkpoint(root);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, std::optional<std::string>(*saved));
  fs::remove_all(root);
}

TEST(CheckpointDir, APartlyWrittenCheckpointIsNeverTheLatestNorLoaded) {
  const std::string root = temp_root();
  ASSERT_TRUE(save(root, 10).ok());
  auto staging = begin_checkpoint(root, 20);  // the save of step 20 is interrupted
  ASSERT_TRUE(staging.ok());
  char byte = 1;
  ASSERT_TRUE(write_checkpoint_file(*staging, "rank0.bin", &byte, 1).ok());
  auto latest = latest_checkpoint(root);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(fs::path(latest->value()).filename(), "step-00000010");
  auto opened = open_checkpoint(*staging);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find("manifest.json is missing: the checkpoint was not completed"),
            std::string::npos)
      << opened.error().message;
  // A later save of the same step starts over.
  EXPECT_TRUE(save(root, 20).ok());
  EXPECT_EQ(fs::path(latest_checkpoint(root)->value()).filename(), "step-00000020");
  fs::remove_all(root);
}

TEST(CheckpointDir, ACorruptedShortOrMissingFileIsNamedOnLoad) {
  const std::string root = temp_root();
  auto saved = save(root, 5);
  ASSERT_TRUE(saved.ok());
  const std::string file = (fs::path(*saved) / "rank1.bin").string();
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  auto opened = open_checkpoint(*saved);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find(file + " is corrupted (CRC32C"), std::string::npos)
      << opened.error().message;
  fs::resize_file(file, 10);
  opened = open_checkpoint(*saved);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find(file + " has 10 bytes, its manifest says 4096"), std::string::npos)
      << opened.error().message;
  fs::remove(file);
  opened = open_checkpoint(*saved);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find(file + " is missing"), std::string::npos) << opened.error().message;
  fs::remove_all(root);
}

TEST(CheckpointDir, KeepLastNeverRemovesTheOnlyCompleteCheckpoint) {
  const std::string root = temp_root();
  for (int64_t step : {5, 10, 15}) ASSERT_TRUE(save(root, step).ok());
  ASSERT_TRUE(begin_checkpoint(root, 7).ok());   // stale: older than the newest complete one
  ASSERT_TRUE(begin_checkpoint(root, 20).ok());  // in flight: kept
  ASSERT_TRUE(prune_checkpoints(root, 2).ok());
  EXPECT_FALSE(fs::exists(fs::path(root) / "step-00000005"));
  EXPECT_TRUE(fs::exists(fs::path(root) / "step-00000010"));
  EXPECT_TRUE(fs::exists(fs::path(root) / "step-00000015"));
  EXPECT_FALSE(fs::exists(fs::path(root) / "step-00000007.partial"));
  EXPECT_TRUE(fs::exists(fs::path(root) / "step-00000020.partial"));
  ASSERT_TRUE(prune_checkpoints(root, 0).ok());  // 0 keeps one all the same
  EXPECT_TRUE(fs::exists(fs::path(root) / "step-00000015"));
  EXPECT_FALSE(fs::exists(fs::path(root) / "step-00000010"));
  fs::remove_all(root);
}

TEST(CheckpointDir, AFullDiskFailsTheSaveNamingThePathAndKeepsThePreviousCheckpoint) {
  const std::string root = temp_root();
  {
    testing::MemoryMount disk(root, "size=256k");
    if (!disk.mounted())
      GTEST_SKIP() << "a 256 KiB tmpfs could not be mounted (needs root): " << disk.error();
    ASSERT_TRUE(save(root, 1, 16 * 1024).ok());
    auto full = save(root, 2, 512 * 1024);  // does not fit
    ASSERT_FALSE(full.ok());
    EXPECT_NE(full.error().message.find("writing " + root +
                                        "/step-00000002.partial/rank0.bin failed: No space left"),
              std::string::npos)
        << full.error().message;
    auto latest = latest_checkpoint(root);
    ASSERT_TRUE(latest.ok());
    EXPECT_EQ(fs::path(latest->value()).filename(), "step-00000001");
    EXPECT_TRUE(open_checkpoint(latest->value()).ok());
  }
  fs::remove_all(root);
}

TEST(CheckpointDir, FileNamesStayInsideTheCheckpoint) {
  const std::string root = temp_root();
  auto staging = begin_checkpoint(root, 1);
  ASSERT_TRUE(staging.ok());
  char byte = 0;
  EXPECT_FALSE(write_checkpoint_file(*staging, "../escape.bin", &byte, 1).ok());
  EXPECT_FALSE(write_checkpoint_file(*staging, "manifest.json", &byte, 1).ok());
  fs::remove_all(root);
}

// Many small requests, a few in flight and an odd tail: the file is exactly the bytes, in order.
TEST(UringFile, WritesExactlyTheBytesAcrossManyRequests) {
  const std::string root = temp_root();
  std::vector<unsigned char> bytes(3 * 65536 + 4093);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + i / 251);
  const std::string path = (fs::path(root) / "data.bin").string();
  ASSERT_TRUE(write_file_uring(path, bytes.data(), bytes.size(),
                               UringFileOptions{65536, 3, std::chrono::milliseconds{60000}})
                  .ok());
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(back, bytes);
  ASSERT_TRUE(write_file_uring(path, bytes.data(), 10).ok());  // rewritten shorter: truncated
  EXPECT_EQ(fs::file_size(path), 10u);
  auto missing = write_file_uring((fs::path(root) / "no" / "file.bin").string(), bytes.data(), 10);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("creating " + root + "/no/file.bin failed: No such file"),
            std::string::npos)
      << missing.error().message;
  fs::remove_all(root);
}

}  // namespace
}  // namespace troupe
