// Optimizer offload over real processes: the state on "cpu" and on "nvme" (real files,
// O_DIRECT where the file system allows it) trains bit for bit alike, and like the state
// in memory to the parity tolerance; a host budget smaller than the state works with
// nvme and is refused with cpu; a bad nvme_path, a full disk and a swap file corrupted
// while training all stop the run with the path and the operation, without hanging.
// Stage 3 with the parameter partition on NVMe too (ZeRO-Infinity) trains bit for bit
// like it in memory, holds what `troupe estimate` predicts, and names a corrupted
// parameter file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/optimizer.hpp"
#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/memory_mount.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

struct Trained {
  testing::CommandResult result;
  std::vector<double> losses;
  std::string parameters;  // raw bytes
};

// 20 steps of a small GPT on 2 ranks, ZeRO stage 2, with `settings` on top; each run
// coordinates on a free port of its own.
Trained train(const std::string& settings, int steps = 20, int timeout_s = 180) {
  std::string dir = testing::make_temp_dir();
  std::string command = std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR +
                        "/configs/tiny-gpt.toml --set train.steps=" + std::to_string(steps) +
                        " --set optimizer.lr=1e-3 --set zero.stage=2 --set zero.reduce_bucket_size=16384" +
                        " --set cluster.coordinator=" + testing::free_coordinator() + settings +
                        " --metrics " + dir + "/metrics.jsonl --parameters-out " + dir + "/parameters.bin";
  Trained t;
  t.result = testing::run_command(command, timeout_s);
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) t.losses.push_back(nlohmann::json::parse(line).at("loss"));
  t.parameters = testing::read_file(dir + "/parameters.bin");
  return t;
}

std::string nvme(const std::string& path) {
  return " --set offload.optimizer=nvme --set offload.nvme_path=" + path;
}

// Stage 3 with layer rows (the tiny GPT's parameters are all below the default threshold).
const std::string stage3 = " --set zero.stage=3 --set zero.param_persistence_threshold=1000";

std::string parameters_on_nvme(const std::string& optimizer_tier, const std::string& path) {
  return stage3 + " --set offload.param=nvme --set offload.optimizer=" + optimizer_tier +
         " --set offload.nvme_path=" + path;
}

nlohmann::json last_metrics_of(const std::string& settings, int steps) {
  std::string dir = testing::make_temp_dir();
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR +
                                    "/configs/tiny-gpt.toml --set train.steps=" + std::to_string(steps) +
                                    " --set cluster.coordinator=" + testing::free_coordinator() + settings +
                                    " --metrics " + dir + "/metrics.jsonl",
                                180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string last;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) last = line;
  return last.empty() ? nlohmann::json::object() : nlohmann::json::parse(last);
}

nlohmann::json estimate_of(const std::string& settings) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " estimate " + TROUPE_SOURCE_DIR +
                                "/configs/tiny-gpt.toml" + settings + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto json =
      nlohmann::json::parse(r.output.substr(std::min(r.output.find('{'), r.output.size())), nullptr, false);
  return json.is_discarded() ? nlohmann::json::object() : json;
}

TEST(Offload, CpuAndNvmeTrainBitForBitAlikeAndLikeTheStateInMemory) {
  Trained memory = train("");
  Trained cpu = train(" --set offload.optimizer=cpu");
  // Small sub-groups and two swap buffers: many reads and writes in flight per step.
  Trained disk = train(nvme(testing::make_temp_dir()) +
                       " --set offload.sub_group_size=4096 --set offload.buffer_count=2");
  ASSERT_EQ(memory.result.exit_code, 0) << memory.result.output;
  ASSERT_EQ(cpu.result.exit_code, 0) << cpu.result.output;
  ASSERT_EQ(disk.result.exit_code, 0) << disk.result.output;
  ASSERT_EQ(cpu.losses.size(), 20u);
  EXPECT_EQ(cpu.losses, disk.losses) << "bit for bit";
  EXPECT_EQ(cpu.parameters, disk.parameters) << "bit for bit";
  ASSERT_FALSE(cpu.parameters.empty());
  // "memory" ([offload] optimizer = "none") runs the same fused kernels in memory; that they
  // equal LibTorch's optimizer is optimizer_kernels_test's to show (and parity_test's, to
  // the tolerance, against `troupe run --reference`). The scalar fallback differs from the
  // AVX paths by where it fuses multiply-adds, within rounding.
  if (std::string(kernels::optimizer_isa()) != "scalar") {
    EXPECT_EQ(cpu.losses, memory.losses) << "bit for bit with the state in memory";
    EXPECT_EQ(cpu.parameters, memory.parameters) << "bit for bit with the state in memory";
  }
  for (std::size_t s = 0; s < 20; ++s)
    EXPECT_NEAR(cpu.losses[s], memory.losses[s], 1e-5 * std::abs(memory.losses[s])) << "step " << s + 1;
  // Another path altogether: LibTorch's own AdamW, in one process on the same global
  // batches (`--reference`); to rounding, as the fused kernel orders its arithmetic its own way.
  Trained libtorch = train(" --reference");
  ASSERT_EQ(libtorch.result.exit_code, 0) << libtorch.result.output;
  ASSERT_EQ(libtorch.losses.size(), 20u);
  for (std::size_t s = 0; s < 20; ++s)
    EXPECT_NEAR(cpu.losses[s], libtorch.losses[s], 1e-5 * std::abs(libtorch.losses[s])) << "step " << s + 1;
  ASSERT_EQ(cpu.parameters.size(), libtorch.parameters.size());
  EXPECT_LT(testing::parameter_distance(testing::floats_of(cpu.parameters),
                                        testing::floats_of(libtorch.parameters)),
            1e-5);
}

TEST(Offload, ParametersOnNvmeTrainBitForBitLikeInMemory) {
  Trained memory = train(stage3 + " --set offload.optimizer=cpu");
  // Small pieces and two swap buffers: every row's block is several files, and many
  // reads and writes are in flight in the optimizer pass.
  std::string small = " --set offload.sub_group_size=4096 --set offload.buffer_count=2";
  Trained both = train(parameters_on_nvme("nvme", testing::make_temp_dir()) + small);
  Trained params = train(parameters_on_nvme("cpu", testing::make_temp_dir()) + small);
  ASSERT_EQ(memory.result.exit_code, 0) << memory.result.output;
  ASSERT_EQ(both.result.exit_code, 0) << both.result.output;
  ASSERT_EQ(params.result.exit_code, 0) << params.result.output;
  ASSERT_EQ(memory.losses.size(), 20u);
  ASSERT_FALSE(memory.parameters.empty());
  EXPECT_EQ(memory.losses, both.losses) << "bit for bit";
  EXPECT_EQ(memory.parameters, both.parameters) << "bit for bit";
  EXPECT_EQ(memory.losses, params.losses) << "bit for bit";
  EXPECT_EQ(memory.parameters, params.parameters) << "bit for bit";
}

// On 4 ranks the page-aligned layout changes the ring's summation order (docs/DESIGN.md), so
// the runs agree to rounding, not bit for bit; with 2 micro-batches and small pieces.
TEST(Offload, ParametersOnNvmeOnFourRanksWithAccumulationAgreeToRounding) {
  std::string shape = stage3 +
                      " --set cluster.world_size=4 --set parallel.dp=4 --set batch.micro_batch_size=4"
                      " --set batch.gradient_accumulation_steps=2";
  Trained memory = train(shape + " --set offload.optimizer=cpu", 10);
  Trained disk = train(shape + parameters_on_nvme("nvme", testing::make_temp_dir()) +
                           " --set offload.sub_group_size=2048 --set offload.buffer_count=2",
                       10);
  ASSERT_EQ(memory.result.exit_code, 0) << memory.result.output;
  ASSERT_EQ(disk.result.exit_code, 0) << disk.result.output;
  ASSERT_EQ(memory.losses.size(), 10u);
  ASSERT_EQ(disk.losses.size(), 10u);
  for (std::size_t s = 0; s < 10; ++s)
    EXPECT_NEAR(disk.losses[s], memory.losses[s], 1e-6 * std::abs(memory.losses[s])) << "step " << s + 1;
  ASSERT_EQ(disk.parameters.size(), memory.parameters.size());
  const auto* a = reinterpret_cast<const float*>(memory.parameters.data());
  const auto* b = reinterpret_cast<const float*>(disk.parameters.data());
  double norm = 0, worst = 0;
  for (std::size_t i = 0; i < memory.parameters.size() / sizeof(float); ++i) {
    norm += double(a[i]) * a[i];
    worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  }
  EXPECT_LE(worst, 1e-6 * std::sqrt(norm));
}

// What each rank holds in host memory, by kind, is what `troupe estimate` predicts, and
// the parameters on NVMe are gone from it; with a budget (state on NVMe too, since the
// state alone is larger) the swap buffers stay inside it.
TEST(Offload, ParametersOnNvmeHoldWhatTheEstimateSaysWithinTheBudget) {
  std::string budget = " --set offload.host_budget_bytes=60000";
  for (std::string tier : {"cpu", "nvme"}) {
    std::string settings =
        parameters_on_nvme(tier, testing::make_temp_dir()) + (tier == "nvme" ? budget : "");
    nlohmann::json measured = last_metrics_of(settings, 3);
    nlohmann::json estimated = estimate_of(settings);
    ASSERT_TRUE(measured.contains("parameter_bytes")) << measured.dump();
    ASSERT_TRUE(estimated.contains("nvme_parameter_bytes")) << estimated.dump();
    EXPECT_EQ(measured.at("parameter_bytes"), estimated.at("parameters_bytes")) << tier;
    EXPECT_EQ(measured.at("gradient_bytes"), estimated.at("gradients_bytes")) << tier;
    EXPECT_EQ(measured.at("optimizer_state_bytes"), estimated.at("optimizer_state_bytes")) << tier;
    EXPECT_EQ(measured.at("communication_bytes"), estimated.at("communication_bytes")) << tier;
    EXPECT_GT(estimated.at("nvme_parameter_bytes").get<int64_t>(), 0);
    if (tier == "nvme") {
      EXPECT_LE(measured.at("optimizer_state_bytes").get<int64_t>(), 60000) << "the budget";
    }
  }
  nlohmann::json in_memory = estimate_of(stage3 + " --set offload.optimizer=cpu");
  nlohmann::json on_nvme = estimate_of(parameters_on_nvme("cpu", "/tmp") + budget);
  // Page-aligned blocks pad the layout a little, so the difference is not exact.
  EXPECT_LT(
      on_nvme.at("parameters_bytes").get<int64_t>(),
      in_memory.at("parameters_bytes").get<int64_t>() - on_nvme.at("nvme_parameter_bytes").get<int64_t>() / 2)
      << "what moves to NVMe leaves host memory";
}

TEST(Offload, NvmeTrainsWithAStateLargerThanTheHostBudget) {
  // The state of this model's half partition is about 550 KB; the budget is 100 KB.
  std::string budget = " --set offload.host_budget_bytes=100000";
  Trained disk = train(nvme(testing::make_temp_dir()) + budget, 5);
  EXPECT_EQ(disk.result.exit_code, 0) << disk.result.output;
  EXPECT_EQ(disk.losses.size(), 5u);
  Trained cpu = train(" --set offload.optimizer=cpu" + budget, 5);
  EXPECT_NE(cpu.result.exit_code, 0);
  EXPECT_NE(cpu.result.output.find("more than host_budget_bytes = 100000; use optimizer = \"nvme\""),
            std::string::npos)
      << cpu.result.output;
}

// `troupe run` refuses a bad nvme_path before any rank starts; a rank started by another
// launcher finds it too, when its engine starts, naming the folder it could not make. A
// missing folder whose parent exists is made.
TEST(Offload, AnNvmePathThatIsMissingOrNotADirectoryIsNamed) {
  Trained missing = train(nvme("/nonexistent/troupe-nvme"), 2, 60);
  EXPECT_EQ(missing.result.exit_code, 2) << missing.result.output;
  EXPECT_NE(missing.result.output.find("[offload] nvme_path /nonexistent/troupe-nvme (to be made): the "
                                       "directory /nonexistent does not exist"),
            std::string::npos)
      << missing.result.output;

  std::string file = testing::make_temp_dir() + "/a-file";
  testing::write_file(file, "not a directory");
  Trained not_dir = train(nvme(file), 2, 60);
  EXPECT_EQ(not_dir.result.exit_code, 2) << not_dir.result.output;
  EXPECT_NE(not_dir.result.output.find("[offload] nvme_path: " + file + " is not a directory"),
            std::string::npos)
      << not_dir.result.output;

  auto rank =
      testing::run_command("TROUPE_RANK=0 TROUPE_WORLD_SIZE=1 " + std::string(TROUPE_BINARY) + " rank " +
                               TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml --set cluster.world_size=1" +
                               " --set parallel.dp=1 --set zero.stage=2" + nvme("/nonexistent/troupe-nvme"),
                           60);
  EXPECT_EQ(rank.exit_code, 1) << rank.output;
  EXPECT_NE(rank.output.find("[offload] nvme_path: creating /nonexistent/troupe-nvme failed: No such file or "
                             "directory"),
            std::string::npos)
      << rank.output;

  // A missing nvme_path whose parent exists is made, as troupe check says it will be.
  const std::string made = testing::make_temp_dir() + "/made-here";
  Trained fresh = train(nvme(made), 2, 60);
  EXPECT_EQ(fresh.result.exit_code, 0) << fresh.result.output;
  EXPECT_EQ(testing::run_command("test -d " + made + "/rank0 && test -d " + made + "/rank1").exit_code, 0);
}

// Trains with `settings(dir)` while flipping bytes at `offset` of rank 0's file `name` in
// the nvme folder until the run notices (a step may rewrite the file); the run must stop
// cleanly, naming the file as corrupt.
void expect_corruption_is_named(const std::string& name, std::size_t offset,
                                const std::function<std::string(const std::string&)>& settings) {
  std::string dir = testing::make_temp_dir();
  std::string file = dir + "/rank0/" + name;
  std::atomic<bool> done{false};
  std::thread corrupt([&] {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (!done && std::chrono::steady_clock::now() < until) {
      int fd = ::open(file.c_str(), O_WRONLY);
      if (fd >= 0) {
        char junk[64];
        std::memset(junk, 0x5a, sizeof(junk));
        (void)!::pwrite(fd, junk, sizeof(junk), static_cast<off_t>(offset));
        ::close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  Trained run = train(settings(dir), 100000, 120);
  done = true;
  corrupt.join();
  EXPECT_NE(run.result.exit_code, 0) << run.result.output;
  EXPECT_LT(run.result.exit_code, 128) << "crashed: " << run.result.output;
  EXPECT_NE(run.result.output.find(file), std::string::npos) << run.result.output;
  EXPECT_NE(run.result.output.find("is corrupt"), std::string::npos) << run.result.output;
}

TEST(Offload, ASwapFileCorruptedWhileTrainingStopsTheRunNamingIt) {
  expect_corruption_is_named("optimizer-00000.bin", 128, nvme);
}

TEST(Offload, AParameterFileCorruptedWhileTrainingStopsTheRunNamingIt) {
  expect_corruption_is_named("param-00001-000.bin", 256,
                             [](const std::string& dir) { return parameters_on_nvme("cpu", dir); });
}

// The pipelined swap: the trace of `troupe bench offload` shows reads of later sub-groups
// running while earlier ones are updated and written back.
struct TracedSpan {
  std::string name;
  double start, end;
};

// The spans of `troupe bench offload` with `buffers` swap buffers. The store records
// each read and write from its first block's completion to its last (bytes moving; small
// blocks, so little of a transfer precedes its span), the optimizer stream each group's
// update. One request in flight makes the device serve groups in the order asked, so a
// group read ahead is still moving while the one before it updates.
std::vector<TracedSpan> traced_offload_pass(int buffers) {
  std::string dir = testing::make_temp_dir();
  std::string trace = dir + "/trace.json";
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " bench offload --dir " + dir +
                                    " --params 4194304 --sub-group-size 262144 --iters 2 --json" +
                                    " --block-size 65536 --queue-depth 1 --threads 1 --buffer-count " +
                                    std::to_string(buffers) + " --trace " + trace,
                                120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto json = nlohmann::json::parse(testing::read_file(trace), nullptr, false);
  EXPECT_FALSE(json.is_discarded());
  std::vector<TracedSpan> spans;
  if (json.is_discarded()) return spans;
  for (const auto& e : json.is_object() ? json.at("traceEvents") : json)
    if (e.value("ph", "") == "X")
      spans.push_back(TracedSpan{e.at("name"), e.at("ts").get<double>(),
                                 e.at("ts").get<double>() + e.at("dur").get<double>()});
  return spans;
}

// Microseconds in which a span named `a...` and one named `b...` both run.
double overlap(const std::vector<TracedSpan>& spans, const std::string& a, const std::string& b) {
  double total = 0;
  for (const TracedSpan& x : spans)
    for (const TracedSpan& y : spans)
      if (x.name.rfind(a, 0) == 0 && y.name.rfind(b, 0) == 0)
        total += std::max(0.0, std::min(x.end, y.end) - std::max(x.start, y.start));
  return total;
}

// Spans start at the first finished block, so on a busy machine a read served at once
// from the page cache can end before the update it runs beside has started: the pass is
// traced up to three times, and one that shows both overlaps is enough (the control
// below, with one buffer, must show none in its one pass).
TEST(Offload, ReadsUpdatesAndWritesOverlapInTheTrace) {
  double read_ahead = 0, write_back = 0;
  for (int attempt = 0; attempt < 3 && (read_ahead == 0 || write_back == 0); ++attempt) {
    auto spans = traced_offload_pass(2);
    read_ahead = overlap(spans, "read optimizer-", "update group");
    write_back = overlap(spans, "write optimizer-", "update group") +
                 overlap(spans, "write optimizer-", "read optimizer-");
  }
  EXPECT_GT(read_ahead, 0) << "reading ahead while updating";
  EXPECT_GT(write_back, 0) << "writing back while the pipeline goes on";
}

// The control: with one swap buffer a group is read, updated and written before the next
// is read, and the same measure finds no overlap — it can tell a pipeline from none.
TEST(Offload, WithOneSwapBufferNothingOverlapsInTheTrace) {
  auto spans = traced_offload_pass(1);
  ASSERT_GT(overlap(spans, "read optimizer-", "read optimizer-"), 0) << "reads were traced";
  EXPECT_EQ(overlap(spans, "read optimizer-", "update group"), 0);
  EXPECT_EQ(overlap(spans, "write optimizer-", "update group"), 0);
  EXPECT_EQ(overlap(spans, "write optimizer-", "read optimizer-"), 0);
}

TEST(Offload, AFullDiskStopsTheRunNamingThePath) {
  std::string dir = testing::make_temp_dir();
  testing::MemoryMount small(dir, "size=256k");
  if (!small.mounted())
    GTEST_SKIP() << "needs a small file system to fill: cannot mount a 256 KiB tmpfs on " << dir << ": "
                 << small.error() << " (euid " << ::geteuid() << ")";
  Trained run = train(nvme(dir), 3, 90);
  EXPECT_NE(run.result.exit_code, 0) << run.result.output;
  EXPECT_LT(run.result.exit_code, 128) << "crashed: " << run.result.output;
  EXPECT_NE(run.result.output.find("No space left on device"), std::string::npos) << run.result.output;
  EXPECT_NE(run.result.output.find(dir + "/rank"), std::string::npos) << run.result.output;
}

constexpr const char* kBufferedLine = "troupe: the nvme tier uses buffered I/O, not direct: ";

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// On a file system that refuses O_DIRECT (ramfs) the run trains, saying once (one host)
// that its nvme I/O is buffered, with the path and the reason; with direct_io = "require"
// it stops naming them; `troupe bench nvme` refuses to report the page cache as the device
// unless asked with --buffered, and then says so. On a directory where the benchmark gets
// O_DIRECT, the run does not say it is buffered.
TEST(Offload, BufferedIoIsSaidOnceAndNeverReportedAsNvme) {
  std::string dir = testing::make_temp_dir();
  testing::MemoryMount ramfs(dir, "", 0, "ramfs");
  if (!ramfs.mounted())
    GTEST_SKIP() << "needs a file system that refuses O_DIRECT: cannot mount a ramfs on " << dir << ": "
                 << ramfs.error() << " (euid " << ::geteuid() << ")";
  Trained buffered = train(nvme(dir), 2, 90);
  Trained required = train(nvme(dir) + " --set offload.direct_io=require", 2, 90);
  auto refused =
      testing::run_command(std::string(TROUPE_BINARY) + " bench nvme --bytes 1048576 --dir " + dir, 60);
  auto measured = testing::run_command(
      std::string(TROUPE_BINARY) + " bench nvme --bytes 1048576 --json --buffered --dir " + dir, 60);

  ASSERT_EQ(buffered.result.exit_code, 0) << buffered.result.output;
  EXPECT_EQ(count_of(buffered.result.output, kBufferedLine), 1u) << buffered.result.output;
  const std::string reason =
      "/rank0: the file system there refuses O_DIRECT (EINVAL), so I/O goes through the page cache";
  EXPECT_NE(buffered.result.output.find(kBufferedLine + dir + reason), std::string::npos)
      << buffered.result.output;

  EXPECT_NE(required.result.exit_code, 0) << required.result.output;
  EXPECT_LT(required.result.exit_code, 128) << "crashed: " << required.result.output;
  EXPECT_NE(required.result.output.find("direct I/O is required, but " + dir + "/rank"), std::string::npos)
      << required.result.output;

  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("refuses O_DIRECT"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("pass --buffered"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("MBps"), std::string::npos) << refused.output;
  ASSERT_EQ(measured.exit_code, 0) << measured.output;
  EXPECT_NE(measured.output.find("\"direct\":0,\"io\":\"buffered (page cache)\""), std::string::npos)
      << measured.output;

  std::string disk = testing::make_temp_dir();
  auto direct =
      testing::run_command(std::string(TROUPE_BINARY) + " bench nvme --bytes 1048576 --dir " + disk, 60);
  if (direct.exit_code == 0) {
    EXPECT_NE(direct.output.find("direct=1 io=direct"), std::string::npos) << direct.output;
    Trained run = train(nvme(disk), 2, 90);
    ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
    EXPECT_EQ(count_of(run.result.output, kBufferedLine), 0u) << run.result.output;
  }
}

}  // namespace
}  // namespace troupe
