// Bad input gets one clear sentence and a non-zero exit, never a crash or a hang:
// config errors (ZeRO's included), a busy coordinator port, a rank with the wrong
// token. Stage 3 with layer sequences that differ across ranks: schedule_test.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <thread>

#include "kernels/devices.hpp"
#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

std::string troupe_command(const std::string& args) {
  return std::string(TROUPE_BINARY) + " " + args;
}

// Writes `toml` to a fresh file and runs `troupe SUBCOMMAND file`.
testing::CommandResult run_on(const std::string& subcommand, const std::string& toml,
                              std::string* path = nullptr) {
  std::string dir = testing::make_temp_dir();
  std::string file = dir + "/job.toml";
  testing::write_file(file, toml);
  if (path) *path = file;
  return testing::run_command(troupe_command(subcommand + " " + file), 60);
}

void expect_refused(const testing::CommandResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "missing \"" << needle << "\" in: " << r.output;
}

TEST(BadInput, TomlSyntaxErrorNamesFileLineAndColumn) {
  std::string path;
  auto r = run_on("run", "[cluster]\nworld_size = 1\n[batch\nmicro_batch_size = 2\n", &path);
  expect_refused(r, path + ":3:");
}

TEST(BadInput, WrongTypeNamesTheKeyAndWhatIsAllowed) {
  std::string path;
  auto r = run_on("run", "[batch]\nmicro_batch_size = \"four\"\n", &path);
  expect_refused(r, path + ":2:");
  expect_refused(r, "micro_batch_size");
}

TEST(BadInput, ZeroStageOutsideZeroToThreeIsRefused) {
  std::string path;
  auto r = run_on("run", "[zero]\nstage = 4\n", &path);
  expect_refused(r, path + ":2:");
  expect_refused(r, "[zero] stage must be one of 0, 1, 2 or 3, got 4");
}

// [scheduler]: DeepSpeed's schedule names and keys, each refusal naming the file, line and key.
TEST(BadInput, LearningRateSchedulesNameTheKeyTheyCannotRun) {
  std::string path;
  const std::string batch = "[batch]\nmicro_batch_size = 2\n";
  auto r = run_on("check", "[scheduler]\ntype = \"WarmupCosine\"\n" + batch, &path);
  expect_refused(r, path + ":2:");
  expect_refused(
      r,
      "[scheduler] type must be one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\" or "
      "\"OneCycle\" (\"\" = a constant lr), got \"WarmupCosine\"; did you mean \"WarmupCosineLR\"?");
  r = run_on("check", "[scheduler]\ntype = \"WarmupLR\"\nwarmup_num_steps = 0\n" + batch, &path);
  expect_refused(r, path + ":3:");
  expect_refused(r, "[scheduler] warmup_num_steps must be a positive integer, got 0");
  r = run_on("check", "[scheduler]\ntype = \"WarmupDecayLR\"\nwarmup_num_steps = 10\n" + batch, &path);
  expect_refused(r, "[scheduler] WarmupDecayLR needs total_num_steps");
  r = run_on("check", "[scheduler]\ntype = \"WarmupLR\"\nwarmup_type = \"exp\"\n" + batch, &path);
  expect_refused(r, path + ":3:");
  expect_refused(r, "[scheduler] warmup_type must be one of \"log\" or \"linear\", got \"exp\"");
  r = run_on("check", "[scheduler]\ntype = \"OneCycle\"\ncycle_max_lr = 0.01\n" + batch, &path);
  expect_refused(r, "[scheduler] OneCycle needs cycle_min_lr and cycle_max_lr");
  r = run_on("check", "[scheduler]\ntype = \"OneCycle\"\ncycle_min_mom = 1.5\n" + batch, &path);
  expect_refused(r, "[scheduler] cycle_min_mom must be a number from 0 to below 1, got 1.5");
}

// [precision]: the dtypes troupe has, and what it cannot run in them yet, named at the key.
TEST(BadInput, PrecisionNamesTheDtypeItCannotRun) {
  std::string path;
  const std::string batch = "[batch]\nmicro_batch_size = 2\n";
  auto r = run_on("check", "[precision]\ndtype = \"fp8\"\n" + batch, &path);
  expect_refused(r, path + ":2:");
  expect_refused(r, "[precision] dtype must be one of \"fp32\", \"bf16\" or \"fp16\", got \"fp8\"");
  // A GPU rank trains 16 bits with fp32 masters, but not through LibTorch's SGD.
  r = run_on(
      "check",
      "[precision]\ndtype = \"fp16\"\n[optimizer]\ntype = \"sgd\"\n[cluster]\ndevice = \"cuda\"\n" + batch,
      &path);
  expect_refused(r, path + ":4:");
  expect_refused(
      r,
      "[optimizer] type = \"sgd\" with [cluster] device = \"cuda\" and dtype = \"fp16\": SGD on a GPU "
      "rank runs as LibTorch's optimizer, without fp32 master weights");
  r = run_on("check", "[precision]\ndtype = \"bf16\"\ncommunication_data_type = \"fp16\"\n" + batch, &path);
  expect_refused(r, path + ":3:");
  expect_refused(
      r, "communication_data_type = \"fp16\" with dtype = \"bf16\": gradients are reduced in the dtype");
  r = run_on("check", "[precision]\ncommunication_data_type = \"int8\"\n" + batch, &path);
  expect_refused(
      r, "[precision] communication_data_type must be empty (the dtype), \"fp32\", \"bf16\" or \"fp16\"");
  r = run_on("check", "[precision]\nloss_scaling = true\nloss_scale = -1.0\n" + batch, &path);
  expect_refused(r, path + ":3:");
  expect_refused(r, "[precision] loss_scale = -1 is not a loss scale: 0 for a dynamic scale");
  r = run_on("check", "[precision]\nloss_scaling = true\nhysteresis = 0\n" + batch, &path);
  expect_refused(r, path + ":3:");
  expect_refused(r, "[precision] hysteresis = 0: the overflows absorbed before the scale halves");
}

TEST(BadInput, ZeroBucketSizesMustBePositive) {
  std::string path;
  auto r = run_on("run", "[zero]\nstage = 2\nreduce_bucket_size = 0\n", &path);
  expect_refused(r, path + ":3:");
  expect_refused(r, "[zero] reduce_bucket_size must be a positive integer up to 2^40 (elements), got 0");
  r = run_on("run", "[zero]\nstage = 3\nprefetch_bucket_size = -8\n", &path);
  expect_refused(r, path + ":3:");
  expect_refused(r, "[zero] prefetch_bucket_size must be a positive integer up to 2^40 (elements), got -8");
  r = run_on("estimate", "[zero]\nmax_live_parameters = 0\n", &path);
  expect_refused(r, "[zero] max_live_parameters must be a positive integer up to 2^40 (elements), got 0");
}

TEST(BadInput, UnknownKeySuggestsTheClosestOne) {
  auto r = run_on("check", "[batch]\nmicro_bach_size = 2\n");
  expect_refused(r, "did you mean micro_batch_size");
}

TEST(BadInput, InconsistentBatchSizesShowTheArithmetic) {
  auto r = run_on("run",
                  "[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 4\ngradient_accumulation_steps = 1\n"
                  "global_batch_size = 10\n");
  expect_refused(r, "4 × gradient_accumulation_steps 1 × dp 2 = 8");
}

TEST(BadInput, WorldSizeMustEqualDpTimesPpTimesTp) {
  auto r = run_on("run", "[cluster]\nworld_size = 3\n[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 1\n");
  expect_refused(r, "world_size");
  EXPECT_NE(r.output.find("dp 2"), std::string::npos) << r.output;
}

// The tiny GPT of these jobs has 4 layers: embedding, 2 blocks, head.
const char* kPipelineJob =
    "[cluster]\nworld_size = 2\n[parallel]\npp = 2\n[batch]\nmicro_batch_size = 1\n"
    "gradient_accumulation_steps = 4\n[model]\nn_layers = 2\n";

TEST(BadInput, PipelineStagesThatDoNotDivideTheWorldAreRefused) {
  std::string path;
  auto r = run_on("check", "[cluster]\nworld_size = 3\n[parallel]\npp = 2\n[batch]\nmicro_batch_size = 1\n",
                  &path);
  expect_refused(r, path + ":2:");
  expect_refused(r, "world_size = 3 is not divisible by pp 2");
}

TEST(BadInput, MoreStagesThanLayersAreRefused) {
  std::string path;
  auto r = run_on("check",
                  "[cluster]\nworld_size = 5\n[parallel]\npp = 5\n[batch]\nmicro_batch_size = 1\n"
                  "gradient_accumulation_steps = 5\n[model]\nn_layers = 2\n",
                  &path);
  expect_refused(r, path + ":4:");
  expect_refused(r, "[parallel] pp = 5 stages, but the [model] GPT has 4 layers");
}

TEST(BadInput, AnExplicitPartitionMustCountEveryLayer) {
  std::string path;
  auto r = run_on("check", std::string(kPipelineJob) + "[pipeline]\npartition = [2, 1]\n", &path);
  expect_refused(r, path + ":11:");
  expect_refused(r, "[pipeline] partition counts 3 layers in all, but the [model] GPT has 4");
  r = run_on("check", std::string(kPipelineJob) + "[pipeline]\npartition = [4]\n", &path);
  expect_refused(r, "partition lists 1 stages' layer counts but [parallel] pp = 2");
}

TEST(BadInput, UnknownScheduleAndPartitionSuggestTheClosest) {
  std::string path;
  auto r = run_on("check", std::string(kPipelineJob) + "[pipeline]\nschedule = \"1fb1\"\n", &path);
  expect_refused(r, path + ":11:");
  expect_refused(r, "did you mean \"1f1b\"?");
  r = run_on("check", std::string(kPipelineJob) + "[pipeline]\npartition = \"unifrom\"\n", &path);
  expect_refused(r, path + ":11:");
  expect_refused(r, "did you mean \"uniform\"?");
  r = run_on(
      "check",
      "[cluster]\nworld_size = 2\n[parallel]\npp = 2\norder = \"tp,dp\"\n[batch]\nmicro_batch_size = 1\n"
      "gradient_accumulation_steps = 4\n");
  expect_refused(r, "[parallel] order must be one of \"pp,dp\" or \"dp,pp\"");
}

TEST(BadInput, OneFOneBWithFewerMicroBatchesThanStagesIsRefused) {
  std::string path;
  auto r = run_on("check",
                  "[cluster]\nworld_size = 4\n[parallel]\npp = 4\n[batch]\nmicro_batch_size = 1\n"
                  "gradient_accumulation_steps = 2\n[pipeline]\nschedule = \"1f1b\"\n",
                  &path);
  expect_refused(r, path + ":9:");
  expect_refused(r, "gradient_accumulation_steps = 2 is below [parallel] pp = 4");
}

TEST(BadInput, OverrideOfAnUnknownKeyIsRefused) {
  auto r = testing::run_command(troupe_command(std::string("check ") + TROUPE_SOURCE_DIR +
                                               "/configs/tiny-gpt.toml --set train.stepz=3"));
  expect_refused(r, "did you mean steps");
}

// Holds a TCP port open for listening for the duration of a test.
class BusyPort {
 public:
  explicit BusyPort(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd_, 4) == 0;
  }
  ~BusyPort() { close(fd_); }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// Without a GPU (or without CUDA in the build, or in LibTorch) each rank says so and which
// key asked. Where a GPU is visible the run may train; gpu_training_test covers that.
TEST(BadInput, CudaDeviceWithoutAGpuIsRefusedNamingTheKey) {
  if (auto devices = kernels::cuda_device_count(); devices && *devices > 0)
    GTEST_SKIP() << "a GPU is visible here: device = \"cuda\" is tested by gpu_training_test";
  auto r = testing::run_command(troupe_command(std::string("run ") + TROUPE_SOURCE_DIR +
                                               "/configs/tiny-gpt.toml --set cluster.device=cuda"
                                               " --set cluster.coordinator=" +
                                               testing::free_coordinator()));
  expect_refused(r, "[cluster] device = \"cuda\"");
  expect_refused(r, "rank ");
  bool explained = r.output.find("built without CUDA") != std::string::npos ||
                   r.output.find("no usable device") != std::string::npos ||
                   r.output.find("no NVIDIA driver is loaded") != std::string::npos ||
                   r.output.find("the NVIDIA driver is older than") != std::string::npos ||
                   r.output.find("has no CUDA device") != std::string::npos ||
                   r.output.find("LibTorch this troupe was built against has no CUDA") != std::string::npos;
  EXPECT_TRUE(explained) << r.output;
}

TEST(BadInput, CoordinatorPortInUseIsRefusedBeforeAnyRankStarts) {
  const int port = testing::free_port();
  const std::string coordinator = "127.0.0.1:" + std::to_string(port);
  BusyPort busy(port);
  ASSERT_TRUE(busy.ok());
  auto r =
      testing::run_command(troupe_command(std::string("run ") + TROUPE_SOURCE_DIR +
                                          "/configs/tiny-gpt.toml --set cluster.coordinator=" + coordinator));
  expect_refused(r, coordinator);
  expect_refused(r, "Address already in use");
}

TEST(BadInput, CoordinatorPortInUseStopsRankZeroWithAClearError) {
  const int port = testing::free_port();
  const std::string coordinator = "127.0.0.1:" + std::to_string(port);
  BusyPort busy(port);
  ASSERT_TRUE(busy.ok());
  auto r =
      testing::run_command("TROUPE_RANK=0 TROUPE_WORLD_SIZE=2 " +
                           troupe_command(std::string("rank ") + TROUPE_SOURCE_DIR +
                                          "/configs/tiny-gpt.toml --set cluster.coordinator=" + coordinator));
  expect_refused(r, "cannot listen on coordinator " + coordinator + ": the port is already in use");
}

TEST(BadInput, RankWithTheWrongTokenIsRefusedAndRankZeroNamesTheMissingRank) {
  std::string config = std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-gpt.toml";
  std::string common =
      " --set cluster.coordinator=" + testing::free_coordinator() + " --set cluster.bootstrap_timeout_s=8";
  testing::CommandResult rank0;
  std::thread coordinator([&] {
    rank0 = testing::run_command(
        "TROUPE_RANK=0 TROUPE_WORLD_SIZE=2 " + troupe_command("rank " + config + common), 60);
  });
  auto rank1 = testing::run_command(
      "TROUPE_RANK=1 TROUPE_WORLD_SIZE=2 " +
          troupe_command("rank " + config + common + " --set cluster.token=not-the-token"),
      60);
  coordinator.join();
  expect_refused(rank1, "refused rank 1: wrong cluster token");
  expect_refused(rank0, "rank(s) 1 did not join within 8 s");
  EXPECT_NE(rank0.output.find("refused a connection claiming rank 1: wrong cluster token"), std::string::npos)
      << rank0.output;
}

// A troupe copied away from its troupe-core still checks a job, and for a rank says where
// it looked for troupe-core instead of failing obscurely.
TEST(BadInput, TroupeWithoutItsCoreProgramNamesWhereItLooked) {
  std::string dir = testing::make_temp_dir();
  std::string alone = dir + "/troupe";
  ASSERT_EQ(testing::run_command(std::string("cp ") + TROUPE_BINARY + " " + alone).exit_code, 0);
  std::string config = std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-gpt.toml";
  EXPECT_EQ(testing::run_command(alone + " check " + config).exit_code, 0);
  auto r = testing::run_command("TROUPE_RANK=0 TROUPE_WORLD_SIZE=1 " + alone + " rank " + config);
  expect_refused(r, "cannot find troupe-core");
  EXPECT_NE(r.output.find(dir + "/troupe-core"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir + "/../libexec/troupe/troupe-core"), std::string::npos) << r.output;
  // troupe run checks its coordinator port before it looks for troupe-core: a free one.
  expect_refused(testing::run_command(alone + " run " + config +
                                      " --set cluster.coordinator=" + testing::free_coordinator()),
                 "cannot find troupe-core");
}

// A rank whose coordinator any other machine could reach needs a token of the user's.
TEST(BadInput, ANonLoopbackCoordinatorWithoutATokenIsRefused) {
  // 192.0.2.1 (TEST-NET-1) is never bound here; the port is a free one all the same.
  const std::string coordinator = "192.0.2.1:" + std::to_string(testing::free_port());
  auto r =
      testing::run_command("env -u TROUPE_TOKEN TROUPE_RANK=0 TROUPE_WORLD_SIZE=2 " +
                           troupe_command(std::string("rank ") + TROUPE_SOURCE_DIR +
                                          "/configs/tiny-gpt.toml --set cluster.coordinator=" + coordinator));
  expect_refused(r,
                 "this rank refuses to start: the coordinator's host 192.0.2.1 is not a loopback address "
                 "and the job has no token");
}

// The token reaches every rank and no line of output, metrics or trace: given in a file,
// with --set, and made by troupe run itself (its 64 hex digits appear nowhere either).
TEST(BadInput, NoOutputOfARunShowsItsToken) {
  std::string dir = testing::make_temp_dir();
  const std::string secret = "correct-horse-battery-staple-7d41";
  testing::write_file(dir + "/token", secret + "\n");
  const std::string common =
      std::string(TROUPE_SOURCE_DIR) +
      "/configs/tiny-gpt.toml --set train.steps=2 --set cluster.coordinator=" + testing::free_coordinator() +
      " --metrics " + dir + "/metrics.jsonl --set trace.path=" + dir + "/trace.json";
  for (const std::string& how :
       {" --set cluster.token_file=" + dir + "/token", " --set cluster.token=" + secret, std::string()}) {
    auto r = testing::run_command("env -u TROUPE_TOKEN " + troupe_command("run " + common + how), 120);
    ASSERT_EQ(r.exit_code, 0) << how << "\n" << r.output;
    const std::string everything =
        r.output + testing::read_file(dir + "/metrics.jsonl") + testing::read_file(dir + "/trace.json");
    EXPECT_EQ(everything.find(secret), std::string::npos) << how;
    EXPECT_FALSE(std::regex_search(everything, std::regex("[0-9a-f]{64}"))) << how;
  }
  auto checked = testing::run_command(troupe_command(std::string("check ") + TROUPE_SOURCE_DIR +
                                                     "/configs/tiny-gpt.toml --set cluster.token=" + secret));
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_EQ(checked.output.find(secret), std::string::npos) << checked.output;
}

// The schedules beyond 1F1B: a shape one cannot run names the key and why; an unknown
// scheduler gets a did-you-mean.
TEST(BadInput, SchedulesRefuseShapesTheyCannotRunAndUnknownNamesSuggestTheClosest) {
  std::string path;
  auto r = run_on("check",
                  "[cluster]\nworld_size = 4\n[parallel]\npp = 4\n[batch]\nmicro_batch_size = 1\n"
                  "gradient_accumulation_steps = 6\n[pipeline]\nschedule = \"interleaved_1f1b\"\n",
                  &path);
  expect_refused(r, path + ":9:");
  expect_refused(r, "6 micro-batches is not a multiple of 4 stages");
  r = run_on("check", std::string(kPipelineJob) + "[pipeline]\nschedule = \"zbv\"\nvirtual_stages = 3\n",
             &path);
  expect_refused(r, path + ":12:");
  expect_refused(r, "zbv runs 2 virtual stages per rank (a V), not 3");
  r = run_on("check",
             std::string(kPipelineJob) + "[pipeline]\nschedule = \"interleaved_1f1b\"\nvirtual_stages = 3\n",
             &path);
  expect_refused(r, path + ":12:");
  expect_refused(
      r,
      "pp = 2 stages of 3 virtual stages each cut the layers into 6 chunks, but the [model] GPT has 4 "
      "layers; each chunk needs at least one");
  r = run_on("check", std::string(kPipelineJob) + "[pipeline]\nschedule = \"zb_h2\"\n", &path);
  expect_refused(r, path + ":11:");
  expect_refused(r, "did you mean \"zb_h1\"?");
  r = run_on("check", std::string(kPipelineJob) + "[pipeline]\nschedule = \"zb_h1\"\n[zero]\nstage = 3\n",
             &path);
  expect_refused(r, "splits each backward into its input and weight halves");
}

// A schedule table: an unknown action names the table's line and cell, a missing
// micro-batch and a deadlock name the stage and its line; all before any rank starts.
TEST(BadInput, ScheduleTablesThatCannotRunNameTheirFileLineAndAction) {
  std::string dir = testing::make_temp_dir();
  auto refused_table = [&](const std::string& table, const std::string& needle) {
    testing::write_file(dir + "/steps.csv", table);
    std::string path;
    auto r =
        run_on("check", std::string(kPipelineJob) + "[pipeline]\nschedule_file = \"" + dir + "/steps.csv\"\n",
               &path);
    expect_refused(r, path + ":11:");
    expect_refused(r, needle);
  };
  refused_table("F0,F1,F2,F3,B0,B1,B2,B3\nF0,B0,F1,X1,F2,B2,F3,B3\n",
                dir + "/steps.csv: line 2 (stage 1), cell 4: \"X1\" is not an action");
  refused_table("F0,F1,F2,F3,B0,B1,B2,B3\nF0,B0,F1,B1,F2,B2,F3\n",
                "stage 1: micro-batch 3 has no backward (stage 0 is line 1, stage 1 is line 2)");
  refused_table(
      "F0,B0,F1,B1,F2,B2,F3,B3\nF1,B1,F0,B0,F2,B2,F3,B3\n",
      "the schedule deadlocks: stage 0 waits at action 3 (recv_gradient 0) for stage 1; stage 1 waits at "
      "action 1 (recv_activation 1) for stage 0");
  std::string path;
  auto r = run_on(
      "check", std::string(kPipelineJob) + "[pipeline]\nschedule_file = \"" + dir + "/none.csv\"\n", &path);
  expect_refused(r, "cannot read the schedule table " + dir + "/none.csv");
}

// `troupe schedule show`: an unknown schedule gets a did-you-mean, a shape the schedule
// cannot run says why; both exit with the usage status and draw nothing.
TEST(BadInput, ScheduleShowRefusesAnUnknownScheduleOrAShapeItCannotRun) {
  auto r = testing::run_command(troupe_command("schedule show --schedule 1fb1 --pp 2 --micro-batches 4"), 60);
  expect_refused(r, "--schedule \"1fb1\" is not a schedule (did you mean \"1f1b\"?)");
  r = testing::run_command(troupe_command("schedule show --schedule 1f1b --pp 4 --micro-batches 2"), 60);
  expect_refused(r, "1f1b needs at least as many micro-batches as stages");
  EXPECT_EQ(r.output.find("stage  0 |"), std::string::npos) << r.output;
}

// The configure step takes a LibTorch 2.x with the C++11 ABI and nothing else: TORCH_PREFIX
// at a folder without one, at a LibTorch 1.x, at one built with the pre-C++11 ABI, or at one
// whose libraries would mix with another LibTorch's stops it with one sentence naming the
// path and what it found (fake LibTorch packages: the CMake files are what is checked).
void expect_torch_refused(const std::string& prefix, const std::string& sentence) {
  const std::string build = testing::make_temp_dir() + "/build";
  auto r = testing::run_command(std::string(TROUPE_CMAKE) + " -S " + TROUPE_SOURCE_DIR + " -B " + build +
                                    " -G Ninja -DTORCH_PREFIX=" + prefix,
                                120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  // CMake folds a message's lines: one space for each run of blanks.
  const std::string out = std::regex_replace(r.output, std::regex(R"(\s+)"), " ");
  EXPECT_NE(out.find(sentence), std::string::npos) << "missing \"" << sentence << "\" in: " << out;
}

// A fake LibTorch `version` under `prefix`, whose CMake package states `flags` and `libraries`.
void fake_torch(const std::string& prefix, const std::string& version, const std::string& flags,
                const std::string& libraries) {
  const std::string dir = prefix + "/share/cmake/Torch";
  ASSERT_EQ(testing::run_command("mkdir -p " + dir + " " + prefix + "/lib").exit_code, 0);
  testing::write_file(dir + "/TorchConfigVersion.cmake",
                      "set(PACKAGE_VERSION \"" + version + "\")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n");
  testing::write_file(dir + "/TorchConfig.cmake", "set(TORCH_CXX_FLAGS \"" + flags +
                                                      "\")\nset(TORCH_LIBRARIES \"" + libraries +
                                                      "\")\nset(TORCH_LIBRARY \"" + libraries + "\")\n");
}

TEST(BadInput, TorchPrefixIsRefusedUnlessItIsALibTorch2WithTheCxx11Abi) {
  const std::string root = testing::make_temp_dir();
  expect_torch_refused(root + "/nothing",
                       "troupe: TORCH_PREFIX " + root +
                           "/nothing holds no LibTorch (no share/cmake/Torch/TorchConfig.cmake "
                           "under it); point it at a LibTorch 2.x with the C++11 ABI");
  fake_torch(root + "/old", "1.13.1", "-D_GLIBCXX_USE_CXX11_ABI=1", root + "/old/lib/libtorch.so");
  expect_torch_refused(root + "/old",
                       "troupe: TORCH_PREFIX " + root +
                           "/old is LibTorch 1.13.1; troupe needs LibTorch 2.x with the C++11 ABI");
  fake_torch(root + "/abi", "2.5.1", "-D_GLIBCXX_USE_CXX11_ABI=0", root + "/abi/lib/libtorch.so");
  expect_torch_refused(root + "/abi", "troupe: TORCH_PREFIX " + root +
                                          "/abi is LibTorch 2.5.1 built with the pre-C++11 "
                                          "(_GLIBCXX_USE_CXX11_ABI=0) ABI;");
  const std::string other = root + "/other/libc10.so";
  fake_torch(root + "/mixed", "2.5.1", "-D_GLIBCXX_USE_CXX11_ABI=1", other);
  expect_torch_refused(root + "/mixed", "troupe: LibTorch 2.5.1 at " + root + "/mixed would link " + other +
                                            ", a library of another LibTorch");
}

}  // namespace
}  // namespace troupe
