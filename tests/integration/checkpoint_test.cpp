// Checkpoints over real processes: a run saved every 5 steps and resumed from its step-10
// checkpoint ends bit for bit where the uninterrupted run ends (losses of steps 11-20 and
// the final parameters), for every ZeRO stage and offload tier with accumulation, and for
// mixed precision, a pipeline with a tied weight, the parameters on NVMe and the loss
// scaler; a checkpoint loads into another dp and ZeRO stage; and a damaged, partial or
// foreign checkpoint is refused naming what is wrong.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/memory_mount.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;
using testing::TrainedRun;

constexpr int kSteps = 20, kResumeAt = 10;

struct Job {
  int stage = 0;
  std::string offload = "none";
  int dp = 2;
  int accumulation = 2;
  std::string settings;  ///< more --set flags
  int tp = 1;
};

Job job(int stage, std::string offload, int dp = 2, int accumulation = 2, std::string settings = "") {
  return Job{stage, std::move(offload), dp, accumulation, std::move(settings)};
}

// tp 2 × dp 2 (4 ranks).
Job tp_job(int stage, std::string offload, std::string settings = "") {
  Job j = job(stage, std::move(offload), 2, 2, std::move(settings));
  j.tp = 2;
  return j;
}

std::string describe(const Job& j) {
  return "stage " + std::to_string(j.stage) + ", offload " + j.offload + ", dp " + std::to_string(j.dp) +
         (j.tp > 1 ? ", tp " + std::to_string(j.tp) : "") + ", accumulation " +
         std::to_string(j.accumulation) + j.settings;
}

std::string quoted(const std::string& value) {
  return "\\\"" + value + "\\\"";
}

// The tiny GPT, a global batch of 16 sequences, saving every 5 steps into ROOT/ckpt; with
// `resume`, continuing from that folder.
std::string command(const Job& j, const std::string& root, const std::string& out,
                    const std::string& resume = "", int pp = 1) {
  const int world = j.dp * pp * j.tp, micro = 16 / j.dp / j.accumulation;
  return std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/tiny-gpt.toml" +
         " --set train.steps=" + std::to_string(kSteps) +
         " --set cluster.world_size=" + std::to_string(world) + " --set parallel.dp=" + std::to_string(j.dp) +
         " --set parallel.pp=" + std::to_string(pp) + " --set parallel.tp=" + std::to_string(j.tp) +
         " --set batch.micro_batch_size=" + std::to_string(micro) +
         " --set batch.gradient_accumulation_steps=" + std::to_string(j.accumulation) +
         " --set batch.global_batch_size=16 --set zero.stage=" + std::to_string(j.stage) +
         " --set zero.reduce_bucket_size=16384 --set zero.param_persistence_threshold=100" +
         " --set offload.optimizer=" + quoted(j.offload) + " --set offload.nvme_path=" + quoted(root) +
         " --set checkpoint.dir=" + quoted(root + "/ckpt") + " --set checkpoint.every_steps=5" +
         " --set checkpoint.keep_last=4" + j.settings +
         " --set cluster.coordinator=" + testing::free_coordinator() + " --metrics " + out +
         ".jsonl --parameters-out " + out + ".bin" + (resume.empty() ? "" : " --resume " + resume);
}

TrainedRun run(const std::string& line) {
  auto r = testing::run_command(line, 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string out =
      line.substr(line.find("--metrics ") + 10, line.find(".jsonl") - line.find("--metrics ") - 10);
  return testing::read_run(out + ".jsonl", out + ".bin");
}

std::string step_folder(const std::string& root, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08d", step);
  return root + "/ckpt/" + name;
}

class Resume : public ::testing::TestWithParam<Job> {};

TEST_P(Resume, ContinuesBitForBitFromTheCheckpoint) {
  const Job j = GetParam();
  const std::string root = testing::make_temp_dir();
  TrainedRun whole = run(command(j, root, root + "/whole"));
  ASSERT_EQ(whole.losses.size(), static_cast<std::size_t>(kSteps));
  ASSERT_TRUE(fs::exists(step_folder(root, kResumeAt) + "/manifest.json"));
  TrainedRun resumed = run(command(j, root, root + "/resumed", step_folder(root, kResumeAt)));
  ASSERT_EQ(resumed.losses.size(), static_cast<std::size_t>(kSteps - kResumeAt)) << "steps 11-20 only";
  for (int s = kResumeAt; s < kSteps; ++s)
    EXPECT_EQ(resumed.losses[static_cast<std::size_t>(s - kResumeAt)],
              whole.losses[static_cast<std::size_t>(s)])
        << "step " << s + 1;
  for (std::size_t s = 0; s < resumed.loss_scales.size(); ++s)
    EXPECT_EQ(resumed.loss_scales[s], whole.loss_scales[s + kResumeAt])
        << "the loss scale of step " << s + 11;
  ASSERT_EQ(resumed.parameters.size(), whole.parameters.size());
  EXPECT_EQ(0, std::memcmp(resumed.parameters.data(), whole.parameters.data(), whole.parameters.size() * 4))
      << "the final parameters differ";
  std::printf("resume: %s: steps 11-20 and the final parameters bit-identical\n", describe(j).c_str());
}

const std::string kBf16 = " --set precision.dtype=" + quoted("bf16");
const std::string kLlama =
    " --set model.type=" + quoted("llama") + " --set model.vocab_size=320 --set model.n_kv_heads=2";

INSTANTIATE_TEST_SUITE_P(
    Checkpoint, Resume,
    ::testing::Values(job(0, "none"), job(1, "none"), job(2, "none"), job(3, "none"), job(0, "cpu"),
                      job(1, "cpu"), job(2, "cpu"), job(3, "cpu"), job(0, "nvme"), job(1, "nvme"),
                      job(2, "nvme"), job(3, "nvme"),
                      // stage 3 with the parameters on NVMe too, in small swapped pieces
                      job(3, "nvme", 2, 2, " --set offload.param=" + quoted("nvme")),
                      // bf16 with fp32 masters, and DeepSpeed's dynamic loss scaler (its scale doubles
                      // every 3 clean steps, so the saved scale matters), a schedule of the rate
                      job(2, "cpu", 2, 2,
                          kBf16 + " --set precision.loss_scaling=true --set precision.loss_scale_window=3" +
                              " --set scheduler.type=" + quoted("WarmupCosineLR") +
                              " --set scheduler.total_num_steps=20 --set scheduler.warmup_num_steps=4"),
                      job(1, "none", 2, 2, " --set checkpoint.async=false"),
                      // the LLaMA family: bf16 over the cpu tier, and stage 3 with its parameters on NVMe
                      job(2, "cpu", 2, 2, kLlama + kBf16),
                      job(3, "nvme", 2, 2, kLlama + " --set offload.param=" + quoted("nvme")),
                      // tensor parallelism: each rank saves its slices; sequence parallel at stage 3,
                      // and the LLaMA in bf16 with its optimizer on the cpu tier
                      tp_job(3, "none", " --set parallel.sequence_parallel=true"),
                      tp_job(1, "cpu", kLlama + kBf16)));

// A pipeline of 2 stages with the embedding tied between them, ZeRO 1, dp 2.
TEST(Checkpoint, ResumesAPipelineWithATiedWeight) {
  const Job j = job(1, "none", 2, 4, " --set model.tie_embeddings=true");
  const std::string root = testing::make_temp_dir();
  TrainedRun whole = run(command(j, root, root + "/whole", "", 2));
  TrainedRun resumed = run(command(j, root, root + "/resumed", step_folder(root, kResumeAt), 2));
  ASSERT_EQ(resumed.losses.size(), static_cast<std::size_t>(kSteps - kResumeAt));
  for (int s = kResumeAt; s < kSteps; ++s)
    EXPECT_EQ(resumed.losses[static_cast<std::size_t>(s - kResumeAt)],
              whole.losses[static_cast<std::size_t>(s)]);
  ASSERT_EQ(resumed.parameters.size(), whole.parameters.size());
  EXPECT_EQ(0, std::memcmp(resumed.parameters.data(), whole.parameters.data(), whole.parameters.size() * 4));
}

// Saved at dp 4 with ZeRO 3, loaded at dp 2 with ZeRO 1 and at dp 1 with ZeRO 0 (its
// optimizer state on NVMe): the files are addressed by parameter and element range. The
// first loss after loading equals the saved run's next loss within 1e-6 (they sum the same
// gradients in other orders), and every loaded run trains as the reference does when it
// starts from the same parameters and optimizer state (plain LibTorch AdamW given the
// checkpoint's consolidated values, moments and step counts): losses within 1e-5, the final
// parameters within 1e-5 of their norm.
TEST(Checkpoint, LoadsIntoAnotherDataParallelSizeAndZeroStage) {
  const std::string root = testing::make_temp_dir();
  TrainedRun saved = run(command(job(3, "none", 4, 1), root, root + "/dp4"));
  ASSERT_EQ(saved.losses.size(), static_cast<std::size_t>(kSteps));
  auto reference_line =
      command(job(0, "none", 1, 1), root, root + "/reference", step_folder(root, kResumeAt));
  reference_line.replace(reference_line.find(" --set train.steps"), 0, " --reference");
  TrainedRun reference = run(reference_line);
  ASSERT_EQ(reference.losses.size(), static_cast<std::size_t>(kSteps - kResumeAt));
  for (const Job& j : {job(1, "none", 2, 2), job(0, "nvme", 1, 2)}) {
    TrainedRun loaded = run(command(j, root, root + "/loaded", step_folder(root, kResumeAt)));
    ASSERT_EQ(loaded.losses.size(), static_cast<std::size_t>(kSteps - kResumeAt)) << describe(j);
    const double first = std::abs(loaded.losses[0] - saved.losses[kResumeAt]) / saved.losses[kResumeAt];
    EXPECT_LT(first, 1e-6) << describe(j) << ": " << loaded.losses[0] << " against "
                           << saved.losses[kResumeAt];
    double worst = 0;
    for (std::size_t s = 0; s < loaded.losses.size(); ++s) {
      const double gap = std::abs(loaded.losses[s] - reference.losses[s]) / reference.losses[s];
      EXPECT_LT(gap, 1e-5) << describe(j) << ": step " << s + 11 << ": " << loaded.losses[s] << " against "
                           << reference.losses[s];
      worst = std::max(worst, gap);
    }
    const double parameters = testing::parameter_distance(loaded.parameters, reference.parameters);
    EXPECT_LT(parameters, 1e-5) << describe(j);
    std::printf(
        "reshard: dp 4 ZeRO 3 -> %s: first loss %.1e from the saved run's, losses 11-20 within %.1e of the "
        "reference resumed from the same checkpoint, parameters %.1e\n",
        describe(j).c_str(), first, worst, parameters);
  }
}

// An exported file's tensors (LibTorch's torch::pickle_load), flattened in its order.
std::vector<float> read_export(const std::string& path, std::vector<std::string>* names) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue loaded = torch::pickle_load(bytes);
  std::vector<float> flat;
  if (!loaded.isGenericDict()) {
    ADD_FAILURE() << path << " is not a dictionary of tensors";
    return flat;
  }
  for (const auto& entry : loaded.toGenericDict()) {
    names->push_back(entry.key().toStringRef());
    at::Tensor t = entry.value().toTensor().contiguous();
    EXPECT_EQ(t.scalar_type(), torch::kFloat32) << names->back();
    flat.insert(flat.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  return flat;
}

// Saved at tp 2 × dp 2 (ZeRO 3, sequence parallel: each rank saves its slices of the split
// tensors, its group's first member the tensors all of them hold), loaded without tensor
// parallelism (dp 2, ZeRO 1), at tp 4 and at tp 2 × pp 2: each trains on as the reference
// resumed from the same checkpoint, within 1e-5. `troupe export` of the last checkpoint is
// the run's final parameters bit for bit.
TEST(Checkpoint, LoadsAcrossTensorParallelSizesAndExportsTheWholeModel) {
  const std::string root = testing::make_temp_dir();
  TrainedRun saved =
      run(command(tp_job(3, "none", " --set parallel.sequence_parallel=true"), root, root + "/tp2"));
  ASSERT_EQ(saved.losses.size(), static_cast<std::size_t>(kSteps));
  // (before the loaded runs below save over its checkpoints)
  auto exported = testing::run_command(std::string(TROUPE_BINARY) + " export " + step_folder(root, kSteps) +
                                       " --out " + root + "/model.pt");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  std::vector<std::string> names;
  std::vector<float> flat = read_export(root + "/model.pt", &names);
  ASSERT_EQ(flat.size(), saved.parameters.size()) << "the whole model, not a slice";
  EXPECT_EQ(0, std::memcmp(flat.data(), saved.parameters.data(), flat.size() * 4));
  auto reference_line =
      command(job(0, "none", 1, 1), root, root + "/reference", step_folder(root, kResumeAt));
  reference_line.replace(reference_line.find(" --set train.steps"), 0, " --reference");
  TrainedRun reference = run(reference_line);
  ASSERT_EQ(reference.losses.size(), static_cast<std::size_t>(kSteps - kResumeAt));
  struct Target {
    Job job;
    int pp;
  };
  Job tp4 = job(2, "none", 1, 1);
  tp4.tp = 4;
  for (const Target& t : {Target{job(1, "none", 2, 2), 1}, Target{tp4, 1}, Target{tp_job(0, "cpu"), 2}}) {
    Job j = t.job;
    if (t.pp > 1) j.dp = 1;
    const std::string what = describe(j) + ", pp " + std::to_string(t.pp);
    TrainedRun loaded = run(command(j, root, root + "/loaded", step_folder(root, kResumeAt), t.pp));
    ASSERT_EQ(loaded.losses.size(), reference.losses.size()) << what;
    double worst = 0;
    for (std::size_t s = 0; s < loaded.losses.size(); ++s) {
      const double gap = std::abs(loaded.losses[s] - reference.losses[s]) / reference.losses[s];
      EXPECT_LT(gap, 1e-5) << what << ": step " << s + 11;
      worst = std::max(worst, gap);
    }
    const double parameters = testing::parameter_distance(loaded.parameters, reference.parameters);
    EXPECT_LT(parameters, 1e-5) << what;
    std::printf(
        "reshard: tp 2 x dp 2 ZeRO 3 -> %s: losses 11-20 within %.1e of the reference, parameters %.1e\n",
        what.c_str(), worst, parameters);
  }
  // A model whose split tensors have another shape is not this checkpoint's.
  auto other = testing::run_command(command(tp_job(1, "none", " --set model.d_ff=128"), root, root + "/other",
                                            step_folder(root, kResumeAt)),
                                    120);
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_LT(other.exit_code, 128) << "crashed: " << other.output;
  EXPECT_NE(
      other.output.find("it saved block0.mlp_in.weight with shape [256, 64], this model's is [128, 64]"),
      std::string::npos)
      << other.output;
}

// Keeps the newest keep_last complete checkpoints; "latest" finds the newest.
TEST(Checkpoint, KeepsTheLastAndResumesFromTheLatest) {
  const std::string root = testing::make_temp_dir();
  Job j = job(2, "cpu", 2, 1, " --set checkpoint.keep_last=2");
  TrainedRun whole = run(command(j, root, root + "/whole"));
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(root + "/ckpt"))
    left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-00000015", "step-00000020"}));
  // Resuming from the latest (step 20) of a 20-step job trains nothing more.
  auto r = testing::run_command(command(j, root, root + "/again", "latest"), 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("after step 20"), std::string::npos) << r.output;
}

// The first data file of the step-10 checkpoint.
std::string a_data_file(const std::string& folder) {
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().extension() == ".bin" && entry.path().string().find("values") != std::string::npos)
      return entry.path().string();
  return "";
}

TEST(Checkpoint, RefusesADamagedPartialOrForeignCheckpointNamingWhy) {
  const std::string root = testing::make_temp_dir();
  Job j = job(1, "none", 2, 1);
  run(command(j, root, root + "/whole"));
  const std::string folder = step_folder(root, kResumeAt);
  const std::string file = a_data_file(folder);
  ASSERT_FALSE(file.empty());
  {  // one flipped byte
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  auto corrupted = testing::run_command(command(j, root, root + "/x", folder), 300);
  EXPECT_NE(corrupted.exit_code, 0);
  EXPECT_NE(corrupted.output.find(file + " is corrupted"), std::string::npos) << corrupted.output;

  fs::resize_file(file, 64);  // truncated
  auto truncated = testing::run_command(command(j, root, root + "/x", folder), 300);
  EXPECT_NE(truncated.exit_code, 0);
  EXPECT_NE(truncated.output.find(file + " has 64 bytes"), std::string::npos) << truncated.output;

  // A save that never finished: its manifest is missing.
  const std::string partial = step_folder(root, 15) + ".partial";
  fs::rename(step_folder(root, 15), partial);
  fs::remove(partial + "/manifest.json");
  auto unfinished = testing::run_command(command(j, root, root + "/x", partial), 300);
  EXPECT_NE(unfinished.exit_code, 0);
  EXPECT_NE(unfinished.output.find("never loaded"), std::string::npos) << unfinished.output;

  // The state of another optimizer: SGD without momentum keeps no state arrays.
  auto foreign = testing::run_command(
      command(j, root, root + "/x", step_folder(root, 20)) + " --set optimizer.type=" + quoted("sgd"), 300);
  EXPECT_NE(foreign.exit_code, 0);
  EXPECT_NE(foreign.output.find("holds 3 arrays per partition; this job's [optimizer] keeps 1 (values)"),
            std::string::npos)
      << foreign.output;
}

// A disk that fills during a save: the save fails naming the path, the job stops with that
// error (not a crash), and the previous checkpoint stays complete and loads. The 2.5 MB
// file system holds one checkpoint of the tiny GPT (1.6 MB) but not a second beside it.
TEST(Checkpoint, AFullDiskFailsTheSaveNamingThePathAndKeepsThePrevious) {
  const std::string root = testing::make_temp_dir();
  const std::string disk = root + "/disk";
  fs::create_directories(disk);
  testing::MemoryMount small(disk, "size=2560k");
  if (!small.mounted())
    GTEST_SKIP() << "needs a small file system to fill: cannot mount a 2.5 MB tmpfs on " << disk << ": "
                 << small.error() << " (euid " << ::geteuid() << ")";
  Job j = job(1, "none", 2, 1, " --set checkpoint.dir=" + quoted(disk) + " --set checkpoint.keep_last=1");
  auto full = testing::run_command(command(j, root, root + "/full"), 300);
  EXPECT_NE(full.exit_code, 0) << full.output;
  EXPECT_LT(full.exit_code, 128) << "crashed: " << full.output;
  EXPECT_NE(full.output.find("No space left on device"), std::string::npos) << full.output;
  EXPECT_NE(full.output.find(disk + "/step-00000010.partial/rank"), std::string::npos) << full.output;
  ASSERT_TRUE(fs::exists(disk + "/step-00000005/manifest.json")) << "the previous checkpoint is kept";
  Job again = job(1, "none", 2, 1, " --set checkpoint.every_steps=0");
  auto resumed = testing::run_command(command(again, root, root + "/again", disk + "/step-00000005"), 300);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
}

// `troupe export` consolidates a ZeRO 3 checkpoint into one file of name -> tensor that
// LibTorch's torch::pickle_load reads (PyTorch's torch.load reads the same archive): its
// tensors, in model order, are the run's --parameters-out bit for bit. A job started from
// that file ([model] init_from) trains as the reference started from it.
TEST(Checkpoint, ExportsOneFileThatLibTorchLoadsAndAJobStartsFrom) {
  const std::string root = testing::make_temp_dir();
  Job j = job(3, "none", 2, 1);
  TrainedRun trained = run(command(j, root, root + "/trained"));
  auto exported = testing::run_command(std::string(TROUPE_BINARY) + " export " + root + "/ckpt --out " +
                                       root + "/model.pt");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find("step-00000020"), std::string::npos) << "the newest: " << exported.output;
  std::vector<std::string> names;
  std::vector<float> flat = read_export(root + "/model.pt", &names);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "embedding.token.weight") << "model order, names as the model has them";
  ASSERT_EQ(flat.size(), trained.parameters.size());
  EXPECT_EQ(0, std::memcmp(flat.data(), trained.parameters.data(), flat.size() * 4));

  const std::string start = " --set model.init_from=" + quoted(root + "/model.pt");
  Job from = job(1, "none", 2, 2, start + " --set checkpoint.every_steps=0");
  TrainedRun engine = run(command(from, root, root + "/from"));
  auto reference_line = command(from, root, root + "/reference");
  reference_line.replace(reference_line.find(" --set train.steps"), 0, " --reference");
  TrainedRun reference = run(reference_line);
  ASSERT_EQ(engine.losses.size(), reference.losses.size());
  for (std::size_t s = 0; s < engine.losses.size(); ++s)
    EXPECT_LT(std::abs(engine.losses[s] - reference.losses[s]) / reference.losses[s], 1e-5)
        << "step " << s + 1;
  EXPECT_LT(engine.losses.front(), 0.8 * trained.losses.front()) << "it starts trained";
}

// Python's side reads it too: PyTorch's torch.load (weights_only, its default since 2.6),
// with the torch whose LibTorch troupe was built against, gives the same tensors as the
// run's --parameters-out, bit for bit (tests/python/check_export.py).
TEST(Checkpoint, PythonsTorchLoadReadsTheExportBitForBit) {
  const std::string python = TROUPE_TORCH_PYTHON;
  if (python.empty())
    GTEST_SKIP() << "no Python whose torch is the LibTorch troupe was built against (TROUPE_TORCH_PYTHON)";
  const std::string root = testing::make_temp_dir();
  run(command(job(1, "none", 2, 1), root, root + "/trained"));
  auto exported = testing::run_command(std::string(TROUPE_BINARY) + " export " + root + "/ckpt --out " +
                                       root + "/model.pt");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto loaded = testing::run_command(python + " " + TROUPE_SOURCE_DIR + "/tests/python/check_export.py " +
                                         root + "/model.pt " + root + "/trained.bin",
                                     120);
  EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_NE(loaded.output.find("equal to"), std::string::npos) << loaded.output;
  std::printf("%s", loaded.output.c_str());
}

}  // namespace
}  // namespace troupe
