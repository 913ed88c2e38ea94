// Tokenized datasets against megatron-core itself (tests/python/megatron_data.py, in the
// Python of scripts/torch-env.sh): what its IndexedDatasetBuilder writes troupe reads token
// for token; what scripts/prepare_data.py writes is byte-identical to its builder's output
// for the same tokens and its IndexedDataset reads it back; a blend picks each sample's
// dataset as its build_blending_indices does. Then training on them, over real processes:
// validation ([train] eval_interval) at parity with `troupe run --reference` whatever the
// layout, the device path on CPU streams too; a run resumed from a checkpoint sees the samples of the
// uninterrupted one; and a 4 GB corpus trains while its loader stays under 100 MB resident.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/data/blend.hpp"
#include "runtime/data/indexed_dataset.hpp"
#include "runtime/data/indexed_samples.hpp"
#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/indexed_writer.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe::testing {
namespace {

const std::string kPython = TROUPE_TORCH_PYTHON;
const std::string kScript = std::string(TROUPE_SOURCE_DIR) + "/tests/python/megatron_data.py";

bool python_has_megatron() {
  return !kPython.empty() &&
         run_command(kPython + " -c \"import megatron.core.datasets.indexed_dataset, tokenizers\"", 120)
                 .exit_code == 0;
}

#define SKIP_WITHOUT_MEGATRON()                                                                     \
  if (!python_has_megatron())                                                                       \
  GTEST_SKIP() << "no Python with megatron-core and tokenizers (TROUPE_TORCH_PYTHON = '" << kPython \
               << "'; scripts/torch-env.sh install adds them)"

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_sequences(const std::string& prefix, const nlohmann::json& expected) {
  auto dataset = IndexedDataset::open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.error().message;
  const IndexedDataset& d = **dataset;
  ASSERT_EQ(d.sequence_count(), static_cast<int64_t>(expected.size()));
  for (int64_t i = 0; i < d.sequence_count(); ++i) {
    const int64_t start = d.sequence_start(i), length = d.sequence_start(i + 1) - start;
    std::vector<int64_t> tokens(static_cast<std::size_t>(length));
    d.read(start, length, tokens.data());
    EXPECT_EQ(tokens, expected[static_cast<std::size_t>(i)].get<std::vector<int64_t>>()) << "sequence " << i;
  }
}

TEST(MegatronData, TroupeReadsWhatMegatronsBuilderWrote) {
  SKIP_WITHOUT_MEGATRON();
  const std::string prefix = make_temp_dir() + "/built";
  auto built = run_command(kPython + " " + kScript + " build " + prefix, 300);
  ASSERT_EQ(built.exit_code, 0) << built.output;
  expect_sequences(prefix, read_json(prefix + ".tokens.json"));
  auto dataset = IndexedDataset::open(prefix);
  ASSERT_TRUE(dataset.ok());
  EXPECT_EQ((*dataset)->document_count(), 40);  // of 56 sequences: every fifth document holds three
  EXPECT_EQ((*dataset)->sequence_count(), 56);
}

TEST(MegatronData, ThePreparersFilesAreMegatronsByteForByte) {
  SKIP_WITHOUT_MEGATRON();
  const std::string dir = make_temp_dir();
  auto prepared = run_command(
      kPython + " " + kScript + " prepare " + TROUPE_SOURCE_DIR + "/scripts/prepare_data.py " + dir, 300);
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  expect_sequences(dir + "/troupe", read_json(dir + "/troupe.tokens.json"));
  // A tokenizer file that does not parse is refused by name, writing nothing.
  write_file(dir + "/broken.json", "{\"model\": ");
  auto refused =
      run_command(kPython + " " + TROUPE_SOURCE_DIR + "/scripts/prepare_data.py --input " + dir +
                      "/corpus.jsonl --tokenizer " + dir + "/broken.json --output-prefix " + dir + "/never",
                  120);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("broken.json' does not parse"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::ifstream(dir + "/never.idx").good());
}

TEST(MegatronData, ABlendPicksAsMegatronsWithinOnePercentOfTheMix) {
  SKIP_WITHOUT_MEGATRON();
  const std::string out = make_temp_dir() + "/blend.json";
  auto made = run_command(kPython + " " + kScript + " blend 10000 " + out + " 0.5 0.3 0.2", 300);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto megatron = read_json(out);
  Blend blend({0.5, 0.3, 0.2});
  int64_t counts[3] = {0, 0, 0};
  for (int64_t i = 0; i < 10000; ++i) {
    const Blend::Pick pick = blend.at(i);
    ASSERT_EQ(pick.dataset, megatron["dataset"][static_cast<std::size_t>(i)].get<int>()) << "sample " << i;
    ASSERT_EQ(pick.index, megatron["index"][static_cast<std::size_t>(i)].get<int64_t>()) << "sample " << i;
    ++counts[pick.dataset];
  }
  const double wanted[3] = {0.5, 0.3, 0.2};
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(counts[k] / 10000.0, wanted[k], 0.01) << "dataset " << k;
  std::printf("blend of 10,000 samples: %.4f %.4f %.4f for 0.5 0.3 0.2\n", counts[0] / 1e4, counts[1] / 1e4,
              counts[2] / 1e4);
}

// Two datasets of seeded random tokens below 320 (the tiny LLaMA's vocabulary), documents of
// 5 to 300 tokens.
std::vector<std::string> training_datasets() {
  static std::vector<std::string> prefixes;
  if (!prefixes.empty()) return prefixes;
  const std::string dir = make_temp_dir();
  uint64_t state = 20261206;
  for (int d = 0; d < 2; ++d) {
    IndexedWriter w(dir + "/corpus" + std::to_string(d));
    for (int doc = 0; doc < 400; ++doc) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::vector<int64_t> tokens(5 + (state >> 33) % 296);
      for (auto& t : tokens) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        t = static_cast<int64_t>((state >> 33) % (d == 0 ? 320 : 64));  // the second, a narrower language
      }
      w.add_sequence(tokens);
      w.end_document();
    }
    w.finish();
    prefixes.push_back(w.prefix);
  }
  return prefixes;
}

// configs/tiny-llama.toml on the two datasets blended 3:1, split 90/10, validated every 5 steps.
std::string data_job() {
  const auto prefixes = training_datasets();
  const std::string path = make_temp_dir() + "/job.toml";
  write_file(path, read_file(std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-llama.toml") +
                       "\n[data]\npaths = [\"" + prefixes[0] + "\", \"" + prefixes[1] +
                       "\"]\nweights = [3, 1]\nsplit = \"90,10\"\n");
  return path;
}

struct Layout {
  std::string name;
  std::string sets;
  bool device_path = false;  ///< on CPU streams standing in for a GPU's (TROUPE_DEVICE_PATH=cpu)
};

TrainedRun train(const std::string& job, const std::string& how, const std::string& sets, int steps,
                 std::vector<double>* val_losses, bool device_path = false) {
  const std::string dir = make_temp_dir();
  auto r = run_command(std::string(device_path ? "TROUPE_DEVICE_PATH=cpu " : "") + TROUPE_BINARY + " run " +
                           job + how + " --set train.steps=" + std::to_string(steps) +
                           " --set train.eval_interval=5 --set train.eval_steps=2" +
                           " --set optimizer.lr=1e-3 --set cluster.coordinator=" + free_coordinator() + sets +
                           " --metrics " + dir + "/metrics.jsonl --parameters-out " + dir + "/parameters.bin",
                       400);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (val_losses) {
    std::ifstream in(dir + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto json = nlohmann::json::parse(line);
      if (json.contains("val_loss")) {
        val_losses->push_back(json.at("val_loss"));
        const double perplexity = std::exp(val_losses->back());
        EXPECT_NEAR(json.at("val_perplexity").get<double>(), perplexity, 1e-9 * perplexity);
      }
    }
  }
  return read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

class Validation : public ::testing::TestWithParam<Layout> {};

TEST_P(Validation, EveryRankTakesPartAndTheLossIsTheReferences) {
  const std::string job = data_job();
  std::vector<double> ref_val, run_val;
  const std::string one =
      " --set cluster.world_size=1 --set parallel.dp=1 --set batch.micro_batch_size=4"
      " --set batch.gradient_accumulation_steps=2";
  const TrainedRun ref = train(job, " --reference", one, 10, &ref_val);
  const TrainedRun run = train(job, "", GetParam().sets, 10, &run_val, GetParam().device_path);
  ASSERT_EQ(ref_val.size(), 2u);
  ASSERT_EQ(run_val.size(), 2u);
  ASSERT_EQ(run.losses.size(), 10u);
  for (std::size_t s = 0; s < 10; ++s) EXPECT_NEAR(run.losses[s], ref.losses[s], 1e-5 * ref.losses[s]);
  double worst = 0;
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_NEAR(run_val[k], ref_val[k], 1e-5 * ref_val[k]) << "validation after step " << 5 * (k + 1);
    worst = std::max(worst, std::abs(run_val[k] - ref_val[k]) / ref_val[k]);
  }
  EXPECT_LT(ref_val[1], ref_val[0]);  // it learns: the held-out loss falls
  std::printf("validation %s: val_loss %.6f %.6f, reference %.6f %.6f, worst %.2e relative\n",
              GetParam().name.c_str(), run_val[0], run_val[1], ref_val[0], ref_val[1], worst);
}

const std::string kDp2 =
    " --set cluster.world_size=2 --set parallel.dp=2 --set batch.micro_batch_size=2"
    " --set batch.gradient_accumulation_steps=2";
const std::string kPp2Dp2 =
    " --set cluster.world_size=4 --set parallel.dp=2 --set parallel.pp=2"
    " --set batch.micro_batch_size=2 --set batch.gradient_accumulation_steps=2";

INSTANTIATE_TEST_SUITE_P(
    Layouts, Validation,
    ::testing::Values(Layout{"dp2_zero1", kDp2 + " --set zero.stage=1"},
                      Layout{"dp2_zero3",
                             kDp2 + " --set zero.stage=3 --set zero.param_persistence_threshold=1000"},
                      Layout{"dp2_zero3_devicePath",
                             kDp2 + " --set zero.stage=3 --set zero.param_persistence_threshold=1000", true},
                      Layout{"pp2_dp2_1f1b", kPp2Dp2},
                      Layout{"pp2_dp2_zbv", kPp2Dp2 + " --set pipeline.schedule=\\\"zbv\\\""},
                      Layout{"tp2_dp2_sequence",
                             " --set cluster.world_size=4 --set parallel.dp=2 --set parallel.tp=2"
                             " --set parallel.sequence_parallel=true --set batch.micro_batch_size=2"
                             " --set batch.gradient_accumulation_steps=2"}),
    [](const ::testing::TestParamInfo<Layout>& info) { return info.param.name; });

TEST(Resume, ARunResumedFromACheckpointSeesTheSamplesOfTheUninterruptedRun) {
  const std::string job = data_job();
  const std::string dir = make_temp_dir();
  const std::string saving =
      kDp2 + " --set checkpoint.dir=\\\"" + dir + "\\\" --set checkpoint.every_steps=5";
  const TrainedRun whole = train(job, "", saving + " --set checkpoint.keep_last=3", 10, nullptr);
  const TrainedRun resumed =
      train(job, " --resume " + dir + "/step-00000005",
            kDp2 + " --set checkpoint.dir=\\\"" + make_temp_dir() + "\\\"", 10, nullptr);
  ASSERT_EQ(whole.losses.size(), 10u);
  ASSERT_EQ(resumed.losses.size(), 5u);  // steps 6 to 10
  for (std::size_t s = 0; s < 5; ++s) EXPECT_EQ(resumed.losses[s], whole.losses[s + 5]) << "step " << s + 6;
  EXPECT_EQ(resumed.parameters, whole.parameters);
}

// The position is the checkpoint's, not step × global batch: a job resumed with twice the
// global batch reads on from the samples the saved run had reached, on every rank and in the
// reference alike.
TEST(Resume, AChangedGlobalBatchGoesOnFromTheCheckpointsPosition) {
  const std::string job = data_job();
  const std::string dir = make_temp_dir();
  train(job, "", kDp2 + " --set checkpoint.dir=\\\"" + dir + "\\\" --set checkpoint.every_steps=5", 5,
        nullptr);
  const auto index = nlohmann::json::parse(read_file(dir + "/step-00000005/rank00000.json"));
  EXPECT_EQ(index.at("samples").get<int64_t>(), 40);  // 5 steps of 8
  const std::string doubled = " --set batch.gradient_accumulation_steps=4 --resume " + dir + "/step-00000005";
  const TrainedRun resumed = train(job, "", kDp2 + doubled, 10, nullptr);
  const TrainedRun reference =
      train(job, " --reference",
            " --set cluster.world_size=1 --set parallel.dp=1 --set batch.micro_batch_size=4" + doubled, 10,
            nullptr);
  ASSERT_EQ(resumed.losses.size(), 5u);
  ASSERT_EQ(reference.losses.size(), 5u);
  for (std::size_t s = 0; s < 5; ++s)
    EXPECT_NEAR(resumed.losses[s], reference.losses[s], 1e-5 * reference.losses[s]);
}

int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

TEST(LargeCorpus, FourGigabytesTrainWhileTheLoaderStaysUnder100MBResident) {
  const std::string dir = make_temp_dir();
  const std::string prefix = dir + "/large";
  constexpr int64_t kDocumentTokens = int64_t{1} << 20;
  constexpr int64_t kDocuments = 1908;  // 1908 × 2^20 uint16 tokens = 4.0 GB
  {
    IndexedWriter w(prefix);
    std::vector<uint16_t> tokens(kDocumentTokens);
    uint64_t state = 7;
    for (int64_t d = 0; d < kDocuments; ++d) {
      for (auto& t : tokens) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        t = static_cast<uint16_t>((state >> 40) % 320);
      }
      w.add_raw(tokens.data(), kDocumentTokens);
      w.end_document();
    }
    w.finish();
  }
  auto dataset = IndexedDataset::open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.error().message;
  ASSERT_GE((*dataset)->token_count() * 2, int64_t{4000000000});
  // The loader's own reads: 20,000 samples from all over the corpus, as the ranks draw them.
  const int64_t before = resident_bytes();
  IndexedSamplesOptions o;
  o.datasets = {*dataset};
  o.split = {969, 30, 1};
  o.seq_len = 1024;
  o.seed = 3;
  o.vocab_size = 320;
  auto samples = IndexedSamples::make(o);
  ASSERT_TRUE(samples.ok()) << samples.error().message;
  std::vector<int64_t> batch(1025 * 8);
  for (int64_t first = 0; first < 20000; first += 8) samples->fill(first * 97, 8, batch.data());
  const int64_t grown = resident_bytes() - before;
  EXPECT_LT(grown, 100 << 20);
  std::printf(
      "4.0 GB corpus: the loader's resident memory grew by %.1f MB over 20,000 samples of 1,025 tokens\n",
      static_cast<double>(grown) / (1 << 20));
  // And the whole path: a rank trains on it.
  const std::string job = make_temp_dir() + "/job.toml";
  write_file(job, read_file(std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-llama.toml") +
                      "\n[data]\npaths = [\"" + prefix + "\"]\n");
  auto r = run_command(std::string(TROUPE_BINARY) + " run " + job +
                           " --set train.steps=3 --set cluster.coordinator=" + free_coordinator(),
                       300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trained 3 steps"), std::string::npos) << r.output;
  std::remove((prefix + ".bin").c_str());
}

}  // namespace
}  // namespace troupe::testing
