// Specifications of the TOML job configuration: loading, --set overrides, resolution
// (derivations and validation), rendering and did-you-mean suggestions.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "base/constant_time.hpp"
#include "runtime/config/load.hpp"
#include "runtime/config/render.hpp"
#include "runtime/config/resolve.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/config/suggest.hpp"
#include "runtime/config/token.hpp"
#include "runtime/devices.hpp"
#include "runtime/estimate.hpp"

namespace troupe {
namespace {

constexpr const char* kMinimal = "[batch]\nmicro_batch_size = 4\n";

Result<JobConfig> load(std::string_view text, const std::vector<std::string>& overrides = {}) {
  return load_config_string(text, "job.toml", overrides);
}

// The error message of a result that must have failed.
std::string error_of(const Result<JobConfig>& result) {
  EXPECT_FALSE(result.ok());
  return result.ok() ? "<no error>" : result.error().message;
}

// A code-built config that resolves: only the micro-batch size is required.
JobConfig minimal_struct() {
  JobConfig config;
  config.batch.micro_batch_size = 4;
  return config;
}

// Writes `bytes` to a fresh file under the test temp dir and returns its path.
std::string write_temp_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "troupe_config_test_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

void expect_same(const JobConfig& a, const JobConfig& b) {
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.cluster.world_size, b.cluster.world_size);
  EXPECT_EQ(a.cluster.coordinator, b.cluster.coordinator);
  EXPECT_EQ(a.cluster.token, b.cluster.token);
  EXPECT_EQ(a.cluster.bootstrap_timeout_s, b.cluster.bootstrap_timeout_s);
  EXPECT_EQ(a.cluster.peer_timeout_s, b.cluster.peer_timeout_s);
  EXPECT_EQ(a.cluster.collective_timeout_s, b.cluster.collective_timeout_s);
  EXPECT_EQ(a.cluster.topology, b.cluster.topology);
  EXPECT_EQ(a.cluster.host_id, b.cluster.host_id);
  EXPECT_EQ(a.cluster.share_gpus, b.cluster.share_gpus);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.pp, b.parallel.pp);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.zero.stage, b.zero.stage);
  EXPECT_EQ(a.zero.reduce_bucket_size, b.zero.reduce_bucket_size);
  EXPECT_EQ(a.zero.overlap_comm, b.zero.overlap_comm);
  EXPECT_EQ(a.zero.prefetch_bucket_size, b.zero.prefetch_bucket_size);
  EXPECT_EQ(a.zero.max_live_parameters, b.zero.max_live_parameters);
  EXPECT_EQ(a.zero.max_reuse_distance, b.zero.max_reuse_distance);
  EXPECT_EQ(a.zero.param_persistence_threshold, b.zero.param_persistence_threshold);
  EXPECT_EQ(a.batch.micro_batch_size, b.batch.micro_batch_size);
  EXPECT_EQ(a.batch.gradient_accumulation_steps, b.batch.gradient_accumulation_steps);
  EXPECT_EQ(a.batch.global_batch_size, b.batch.global_batch_size);
  EXPECT_EQ(a.optimizer.type, b.optimizer.type);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.momentum, b.optimizer.momentum);
  EXPECT_EQ(a.optimizer.nesterov, b.optimizer.nesterov);
  EXPECT_EQ(a.optimizer.gradient_clipping, b.optimizer.gradient_clipping);
  EXPECT_EQ(a.model.type, b.model.type);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  EXPECT_EQ(a.model.d_model, b.model.d_model);
  EXPECT_EQ(a.model.n_layers, b.model.n_layers);
  EXPECT_EQ(a.model.n_heads, b.model.n_heads);
  EXPECT_EQ(a.model.d_ff, b.model.d_ff);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.synthetic_bytes, b.data.synthetic_bytes);
  EXPECT_EQ(a.data.prefetch_micro_batches, b.data.prefetch_micro_batches);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.log_interval, b.train.log_interval);
  EXPECT_EQ(a.train.threads, b.train.threads);
  EXPECT_EQ(a.train.metrics_path, b.train.metrics_path);
  EXPECT_EQ(a.train.max_restarts, b.train.max_restarts);
  EXPECT_EQ(a.model.init_from, b.model.init_from);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.every_steps, b.checkpoint.every_steps);
  EXPECT_EQ(a.checkpoint.keep_last, b.checkpoint.keep_last);
  EXPECT_EQ(a.checkpoint.async, b.checkpoint.async);
  EXPECT_EQ(a.checkpoint.resume, b.checkpoint.resume);
  EXPECT_EQ(a.trace.path, b.trace.path);
}

// ---- Loading: names, types and positions ----

TEST(ConfigLoad, MissingSectionsAndKeysKeepTheirDefaults) {
  Result<JobConfig> config = load(kMinimal);
  ASSERT_TRUE(config.ok()) << config.error().message;
  const JobConfig defaults;
  EXPECT_EQ(config->cluster.coordinator, defaults.cluster.coordinator);
  EXPECT_EQ(config->optimizer.lr, defaults.optimizer.lr);
  EXPECT_EQ(config->model.d_model, defaults.model.d_model);
  EXPECT_EQ(config->train.steps, defaults.train.steps);
}

TEST(ConfigLoad, SourceIsTheNameGivenForTheText) {
  Result<JobConfig> config = load(kMinimal);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->source, "job.toml");
}

TEST(ConfigLoad, EveryKeyOfEverySectionIsRead) {
  Result<JobConfig> config = load(R"(
[cluster]
world_size = 2
coordinator = "node0:4000"
token = "s3cret"
bootstrap_timeout_s = 5
peer_timeout_s = 2.5
collective_timeout_s = 30
[parallel]
dp = 2
pp = 1
tp = 1
[zero]
reduce_bucket_size = 4096
[batch]
micro_batch_size = 3
gradient_accumulation_steps = 2
global_batch_size = 12
[optimizer]
type = "sgd"
lr = 0.1
betas = [0.8, 0.9]
eps = 1e-6
weight_decay = 0
momentum = 0.9
nesterov = true
gradient_clipping = 1.0
[model]
type = "gpt"
vocab_size = 300
seq_len = 16
d_model = 32
n_layers = 3
n_heads = 2
d_ff = 100
[data]
path = ""
synthetic_bytes = 1000
prefetch_micro_batches = 3
[train]
steps = 7
seed = 42
log_interval = 2
threads = 1
metrics_path = "m.jsonl"
[trace]
path = "t.json"
)");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->cluster.coordinator, "node0:4000");
  EXPECT_EQ(config->cluster.peer_timeout_s, 2.5);
  EXPECT_EQ(config->zero.reduce_bucket_size, 4096);
  EXPECT_EQ(config->batch.global_batch_size, 12);
  EXPECT_EQ(config->optimizer.type, OptimizerType::sgd);
  EXPECT_EQ(config->optimizer.beta1, 0.8);
  EXPECT_TRUE(config->optimizer.nesterov);
  EXPECT_EQ(config->optimizer.gradient_clipping, 1.0);
  EXPECT_EQ(config->model.d_ff, 100);
  EXPECT_EQ(config->data.prefetch_micro_batches, 3);
  EXPECT_EQ(config->train.metrics_path, "m.jsonl");
  EXPECT_EQ(config->trace.path, "t.json");
}

TEST(ConfigLoad, SyntaxErrorGivesTomlDescriptionWithFileLineColumn) {
  EXPECT_EQ(error_of(load("[batch]\nmicro_batch_size = four\n")),
            "job.toml:2:21: invalid TOML: error while parsing boolean: expected 'false', "
            "saw 'fo'");
}

TEST(ConfigLoad, SyntaxErrorAtEndOfFileNamesItsPosition) {
  EXPECT_EQ(error_of(load("[batch]\nmicro_batch_size = [1,\n")),
            "job.toml:2:24: invalid TOML: error while parsing array: encountered end-of-file");
}

TEST(ConfigLoad, StringWhereIntegerExpectedNamesPositionKeyValueAndAllowed) {
  EXPECT_EQ(error_of(load("[batch]\nmicro_batch_size = \"four\"\n")),
            "job.toml:2:20: [batch] micro_batch_size must be a positive integer up to 2^20, or \"auto\", got "
            "\"four\" "
            "(a string)");
}

TEST(ConfigLoad, FloatWhereIntegerExpectedIsAnError) {
  EXPECT_EQ(
      error_of(load("[batch]\nmicro_batch_size = 4.0\n")),
      "job.toml:2:20: [batch] micro_batch_size must be a positive integer up to 2^20, or \"auto\", got 4.0 "
      "(a float)");
}

TEST(ConfigLoad, IntegerWhereFloatExpectedIsPromoted) {
  Result<JobConfig> config = load(std::string(kMinimal) + "[optimizer]\nlr = 1\n");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->optimizer.lr, 1.0);
}

TEST(ConfigLoad, BooleanKeyRejectsAString) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[optimizer]\nnesterov = \"yes\"\n")),
            "job.toml:4:12: [optimizer] nesterov must be true or false, got \"yes\" (a string)");
}

TEST(ConfigLoad, UnknownKeySuggestsTheClosestKey) {
  EXPECT_EQ(error_of(load("[batch]\nmicro_bach_size = 4\n")),
            "job.toml:2:1: unknown key [batch] micro_bach_size; did you mean micro_batch_size?");
}

TEST(ConfigLoad, UnknownKeyOfAnotherSectionNamesThatSection) {
  EXPECT_EQ(error_of(load("[batch]\nlr = 0.1\n")),
            "job.toml:2:1: unknown key [batch] lr; did you mean [optimizer] lr?");
}

TEST(ConfigLoad, UnknownKeyWithNothingCloseListsTheAllowedKeys) {
  EXPECT_EQ(error_of(load("[batch]\nsize = 4\n")),
            "job.toml:2:1: unknown key [batch] size; the keys of [batch] are micro_batch_size, "
            "gradient_accumulation_steps, global_batch_size, memory_budget_bytes");
}

TEST(ConfigLoad, UnknownSectionSuggestsTheClosestSection) {
  EXPECT_EQ(error_of(load("[clustr]\ntoken = \"x\"\n")),
            "job.toml:1:2: unknown section [clustr]; did you mean [cluster]?");
}

TEST(ConfigLoad, UnknownSectionWithNothingCloseListsTheSections) {
  EXPECT_EQ(error_of(load("[logging]\nlevel = 1\n")),
            "job.toml:1:2: unknown section [logging]; the sections are [cluster], [parallel], "
            "[pipeline], [zero], [offload], [batch], [optimizer], [scheduler], [precision], [model], [data], "
            "[train], [checkpoint], [trace], [monitor]");
}

TEST(ConfigLoad, TheMonitorsQueueHoldsAtLeastOneRecord) {
  const std::string error =
      error_of(load(std::string(kMinimal) + "[monitor]\ntensorboard = \"runs/a\"\nqueue = 0\n"));
  EXPECT_NE(error.find("[monitor] queue"), std::string::npos) << error;
  EXPECT_NE(error.find("an integer from 1 to 2^20"), std::string::npos) << error;
}

TEST(ConfigLoad, CheckpointSavingNeedsAFolderAndOptimizerStateTroupeSaves) {
  EXPECT_EQ(error_of(load("[batch]\nmicro_batch_size = 1\n[checkpoint]\nevery_steps = 5\n")),
            "job.toml:4:15: [checkpoint] every_steps = 5 needs a folder to save into: set [checkpoint] dir");
  EXPECT_EQ(
      error_of(load("[batch]\nmicro_batch_size = 1\n[checkpoint]\nresume = \"latest\"\n")),
      "job.toml:4:10: [checkpoint] resume = \"latest\" looks under [checkpoint] dir, which is not set; set "
      "dir or name the checkpoint folder");
  EXPECT_NE(error_of(load("[batch]\nmicro_batch_size = 1\n[checkpoint]\ndir = \"c\"\nkeep_last = 0\n"))
                .find("keep_last must be an integer from 1"),
            std::string::npos);
  const std::string gpu =
      "[batch]\nmicro_batch_size = 1\n[cluster]\ndevice = \"cuda\"\n[checkpoint]\ndir = "
      "\"c\"\nevery_steps = 5\n";
  EXPECT_TRUE(load(gpu).ok()) << "a GPU rank's fused Adam is saved";
  EXPECT_EQ(
      error_of(load(gpu + "[optimizer]\ntype = \"sgd\"\n")),
      "job.toml:9:8: [optimizer] type = \"sgd\" with [cluster] device = \"cuda\" and [checkpoint]: SGD on a "
      "GPU rank runs as LibTorch's optimizer, whose momentum troupe does not save; use adamw or adam, or "
      "[offload] optimizer = \"cpu\" (troupe's kernels on the host)");
  auto fine =
      load("[batch]\nmicro_batch_size = 1\n[checkpoint]\ndir = \"c\"\nevery_steps = 5\nasync = false\n");
  ASSERT_TRUE(fine.ok()) << fine.error().message;
  EXPECT_EQ(fine->checkpoint.every_steps, 5);
  EXPECT_FALSE(fine->checkpoint.async);
  EXPECT_EQ(fine->checkpoint.keep_last, 2);
}

TEST(ConfigLoad, KeyOutsideAnySectionNamesItsSection) {
  EXPECT_EQ(error_of(load("steps = 4\n")),
            "job.toml:1:1: key steps is outside any section; did you mean [train] steps?");
}

TEST(ConfigLoad, SectionWrittenAsAValueIsAnError) {
  EXPECT_EQ(error_of(load("batch = 4\n")),
            "job.toml:1:9: [batch] must be a section (a table), got 4 (an integer)");
}

TEST(ConfigLoad, ErrorsComeInFileOrderNotAlphabetical) {
  EXPECT_EQ(error_of(load("[train]\nzzz = 1\naaa = 2\n")).substr(0, 15), "job.toml:2:1: u");
}

TEST(ConfigLoad, OptimizerTypeAcceptsAdamwAdamAndSgd) {
  for (const auto& [name, type] :
       {std::pair{"adamw", OptimizerType::adamw}, std::pair{"adam", OptimizerType::adam},
        std::pair{"sgd", OptimizerType::sgd}}) {
    Result<JobConfig> config = load(std::string(kMinimal) + "[optimizer]\ntype = \"" + name + "\"\n");
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->optimizer.type, type) << name;
  }
}

TEST(ConfigLoad, OptimizerTypeTypoSuggestsTheClosestType) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[optimizer]\ntype = \"adamx\"\n")),
            "job.toml:4:8: [optimizer] type must be one of \"adamw\", \"adam\" or \"sgd\", got "
            "\"adamx\"; did you mean \"adamw\"?");
}

TEST(ConfigLoad, BetasArraySetsBothBetasAndPromotesIntegers) {
  Result<JobConfig> config = load(std::string(kMinimal) + "[optimizer]\nbetas = [0, 0.95]\n");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->optimizer.beta1, 0.0);
  EXPECT_EQ(config->optimizer.beta2, 0.95);
}

TEST(ConfigLoad, BetasWithThreeElementsIsAnError) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[optimizer]\nbetas = [0.9, 0.95, 0.99]\n")),
            "job.toml:4:9: [optimizer] betas must be an array of two numbers [beta1, beta2], "
            "each at least 0 and below 1, got [0.9, 0.95, 0.99] (an array)");
}

TEST(ConfigLoad, FileIsReadAndItsPathBecomesTheSource) {
  const std::string path = write_temp_file("job.toml", kMinimal);
  Result<JobConfig> config = load_config_file(path, {});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->source, path);
  EXPECT_EQ(config->batch.micro_batch_size, 4);
}

TEST(ConfigLoad, MissingFileIsAnErrorNamingThePath) {
  EXPECT_EQ(error_of(load_config_file("/nonexistent/job.toml", {})),
            "cannot read config file /nonexistent/job.toml: No such file or directory");
}

TEST(ConfigLoad, ErrorsInAFileNameThatFile) {
  const std::string path = write_temp_file("bad.toml", "[batch]\nmicro_batch_size = -1\n");
  EXPECT_EQ(
      error_of(load_config_file(path, {})),
      path + ":2:20: [batch] micro_batch_size must be a positive integer up to 2^20, or \"auto\", got -1");
}

// ---- Overrides ----

TEST(ConfigOverride, ReplacesTheFileValue) {
  Result<JobConfig> config = load(kMinimal, {"batch.micro_batch_size=8"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->batch.micro_batch_size, 8);
}

TEST(ConfigOverride, CreatesAMissingSection) {
  Result<JobConfig> config = load(kMinimal, {"train.steps=3"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->train.steps, 3);
}

TEST(ConfigOverride, LaterOverrideOfTheSameKeyWins) {
  Result<JobConfig> config = load(kMinimal, {"train.steps=3", "train.steps=5"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->train.steps, 5);
}

TEST(ConfigOverride, ValueIsParsedAsToml) {
  Result<JobConfig> config =
      load(kMinimal, {"optimizer.lr=1e-3", "optimizer.betas=[0.9, 0.95]", "optimizer.nesterov=true",
                      "optimizer.momentum=0.5", "cluster.token=\"quoted\""});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->optimizer.lr, 1e-3);
  EXPECT_EQ(config->optimizer.beta2, 0.95);
  EXPECT_TRUE(config->optimizer.nesterov);
  EXPECT_EQ(config->cluster.token, "quoted");
}

TEST(ConfigOverride, ValueThatIsNotTomlIsABareString) {
  Result<JobConfig> config = load(kMinimal, {"cluster.token=abc", "cluster.coordinator=node7:2000"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->cluster.token, "abc");
  EXPECT_EQ(config->cluster.coordinator, "node7:2000");
}

TEST(ConfigOverride, WrongTypeNamesTheOverrideText) {
  EXPECT_EQ(error_of(load(kMinimal, {"batch.micro_batch_size=four"})),
            "--set batch.micro_batch_size=four: [batch] micro_batch_size must be a positive "
            "integer up to 2^20, or \"auto\", got \"four\" (a string)");
}

TEST(ConfigOverride, UnknownKeyNamesTheOverrideAndSuggests) {
  EXPECT_EQ(error_of(load(kMinimal, {"batch.micro_bach_size=4"})),
            "--set batch.micro_bach_size=4: unknown key [batch] micro_bach_size; did you mean "
            "micro_batch_size?");
}

TEST(ConfigOverride, UnknownSectionNamesTheOverrideAndSuggests) {
  EXPECT_EQ(error_of(load(kMinimal, {"clustr.token=abc"})),
            "--set clustr.token=abc: unknown section [clustr]; did you mean [cluster]?");
}

TEST(ConfigOverride, MissingEqualsShowsTheExpectedForm) {
  EXPECT_EQ(error_of(load(kMinimal, {"batch.micro_batch_size"})),
            "--set batch.micro_batch_size: an override must have the form section.key=value, "
            "e.g. --set batch.micro_batch_size=4");
}

TEST(ConfigOverride, MissingDotShowsTheExpectedForm) {
  EXPECT_EQ(error_of(load(kMinimal, {"steps=4"})),
            "--set steps=4: an override must have the form section.key=value, e.g. --set "
            "batch.micro_batch_size=4");
}

TEST(ConfigOverride, AppliesBeforeValidation) {
  // The file alone is inconsistent (4 × 1 × 1 != 10); the override fixes it.
  const char* text = "[batch]\nmicro_batch_size = 4\nglobal_batch_size = 10\n";
  Result<JobConfig> config = load(text, {"batch.global_batch_size=8"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->batch.gradient_accumulation_steps, 2);
}

TEST(ConfigOverride, ValidationErrorsNameTheOverrideText) {
  EXPECT_EQ(error_of(load(kMinimal, {"train.steps=0"})),
            "--set train.steps=0: [train] steps must be a positive integer up to 2^40, got 0");
}

// ---- Resolution: world size and dp ----

TEST(ConfigResolve, WorldSizeIsDerivedFromDp) {
  JobConfig raw = minimal_struct();
  raw.parallel.dp = 3;
  Result<JobConfig> config = resolve_config(raw);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->cluster.world_size, 3);
}

TEST(ConfigResolve, DpIsDerivedFromWorldSize) {
  JobConfig raw = minimal_struct();
  raw.cluster.world_size = 4;
  Result<JobConfig> config = resolve_config(raw);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->parallel.dp, 4);
}

TEST(ConfigResolve, WorldSizeAndDpBothUnsetMeanOneRank) {
  Result<JobConfig> config = resolve_config(minimal_struct());
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->cluster.world_size, 1);
  EXPECT_EQ(config->parallel.dp, 1);
}

TEST(ConfigResolve, WorldSizeThatDisagreesWithDpShowsTheArithmetic) {
  const std::string text = std::string(kMinimal) + "[cluster]\nworld_size = 3\n[parallel]\ndp = 2\n";
  EXPECT_EQ(error_of(load(text)),
            "job.toml:4:14: [cluster] world_size = 3 does not equal dp 2 × pp 1 × tp 1 = 2");
}

TEST(ConfigResolve, OneFOneBNeedsAtLeastAsManyMicroBatchesAsStages) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[parallel]\npp = 2\n")),
            "job.toml:4:6: [parallel] pp = 2 stages with schedule \"1f1b\" need at least 2 micro-batches, but "
            "[batch] gradient_accumulation_steps = 1; raise gradient_accumulation_steps or use [pipeline] "
            "schedule = \"gpipe\"");
}

TEST(ConfigResolve, TensorParallelismSplitsHeadsWidthAndVocabularyEvenly) {
  JobConfig raw = minimal_struct();
  raw.cluster.world_size = 0;
  raw.parallel.dp = 1;
  raw.parallel.tp = 2;
  auto ok = resolve_config(raw);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->cluster.world_size, 2);  // dp 1 × pp 1 × tp 2
  raw.parallel.tp = 3;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [model] n_heads = 4 is not divisible by [parallel] tp = 3: tensor parallelism splits "
            "attention heads evenly across the group");
  raw.parallel.tp = 2;
  raw.parallel.sequence_parallel = true;
  raw.model.seq_len = 33;
  EXPECT_EQ(
      error_of(resolve_config(raw)),
      "<struct>: [model] seq_len = 33 is not divisible by [parallel] tp = 2: sequence_parallel splits every "
      "sequence evenly across the group");
  raw.parallel.tp = 0;
  const std::string zero = error_of(resolve_config(raw));
  EXPECT_NE(zero.find("[parallel] tp must be an integer from 1 to 65536"), std::string::npos) << zero;
  EXPECT_NE(zero.find("got 0"), std::string::npos) << zero;
}

// ---- Resolution: the batch rule global = micro × accumulation × dp ----

TEST(ConfigResolve, InconsistentBatchTripleShowsTheArithmetic) {
  EXPECT_EQ(error_of(load("[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 4\n"
                          "gradient_accumulation_steps = 1\nglobal_batch_size = 10\n")),
            "job.toml:6:21: [batch] global_batch_size = 10 does not equal micro_batch_size 4 × "
            "gradient_accumulation_steps 1 × dp 2 = 8");
}

TEST(ConfigResolve, MicroAndAccumulationDetermineGlobal) {
  JobConfig raw = minimal_struct();
  raw.parallel.dp = 2;
  raw.batch.gradient_accumulation_steps = 3;
  Result<JobConfig> config = resolve_config(raw);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->batch.global_batch_size, 24);
}

TEST(ConfigResolve, MicroAndGlobalDetermineAccumulation) {
  JobConfig raw = minimal_struct();
  raw.parallel.dp = 2;
  raw.batch.global_batch_size = 24;
  Result<JobConfig> config = resolve_config(raw);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->batch.gradient_accumulation_steps, 3);
}

TEST(ConfigResolve, AccumulationAndGlobalDetermineMicro) {
  JobConfig raw;
  raw.parallel.dp = 2;
  raw.batch.gradient_accumulation_steps = 3;
  raw.batch.global_batch_size = 24;
  Result<JobConfig> config = resolve_config(raw);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->batch.micro_batch_size, 4);
}

TEST(ConfigResolve, OnlyMicroMeansOneAccumulationStep) {
  JobConfig raw = minimal_struct();
  raw.parallel.dp = 2;
  Result<JobConfig> config = resolve_config(raw);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->batch.gradient_accumulation_steps, 1);
  EXPECT_EQ(config->batch.global_batch_size, 8);
}

TEST(ConfigResolve, OnlyGlobalIsSplitAcrossDpWithOneAccumulationStep) {
  JobConfig raw;
  raw.parallel.dp = 2;
  raw.batch.global_batch_size = 8;
  Result<JobConfig> config = resolve_config(raw);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->batch.gradient_accumulation_steps, 1);
  EXPECT_EQ(config->batch.micro_batch_size, 4);
}

TEST(ConfigResolve, GlobalThatDoesNotDivideShowsTheArithmetic) {
  EXPECT_EQ(error_of(load("[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 4\n"
                          "global_batch_size = 10\n")),
            "job.toml:5:21: [batch] global_batch_size = 10 is not a multiple of "
            "micro_batch_size 4 × dp 2 = 8, so gradient_accumulation_steps cannot be derived");
}

TEST(ConfigResolve, GlobalSmallerThanMicroTimesDpIsAnError) {
  JobConfig raw = minimal_struct();
  raw.parallel.dp = 2;
  raw.batch.global_batch_size = 4;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [batch] global_batch_size = 4 is not a multiple of micro_batch_size 4 × "
            "dp 2 = 8, so gradient_accumulation_steps cannot be derived");
}

TEST(ConfigResolve, OnlyAccumulationSaysWhatElseToSet) {
  EXPECT_EQ(error_of(load("[batch]\ngradient_accumulation_steps = 2\n")),
            "job.toml:2:31: [batch] only gradient_accumulation_steps is set; also set "
            "micro_batch_size or global_batch_size (global = micro × accumulation × dp)");
}

TEST(ConfigResolve, NoBatchSizeSaysWhichToSet) {
  EXPECT_EQ(error_of(load("")),
            "job.toml: [batch] no batch size is set; set micro_batch_size, or two of "
            "micro_batch_size, gradient_accumulation_steps and global_batch_size "
            "(global = micro × accumulation × dp)");
}

TEST(ConfigResolve, NegativeBatchSizeIsAnError) {
  JobConfig raw = minimal_struct();
  raw.batch.gradient_accumulation_steps = -2;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [batch] gradient_accumulation_steps must be a positive integer up to 2^20, got -2");
}

// The bounds keep micro × accumulation × dp within 2^56: a product that would overflow is
// refused by the bound of its first factor.
TEST(ConfigResolve, BatchFactorsBeyondTheirBoundsAreRefusedBeforeTheyAreMultiplied) {
  JobConfig raw = minimal_struct();
  raw.batch.micro_batch_size = int64_t{1} << 40;
  raw.batch.gradient_accumulation_steps = int64_t{1} << 30;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [batch] micro_batch_size must be a positive integer up to 2^20, or \"auto\", got "
            "1099511627776");
  raw.batch.micro_batch_size = int64_t{1} << 20;
  raw.batch.gradient_accumulation_steps = (int64_t{1} << 20) + 1;
  EXPECT_EQ(
      error_of(resolve_config(raw)),
      "<struct>: [batch] gradient_accumulation_steps must be a positive integer up to 2^20, got 1048577");
}

TEST(ConfigResolve, EveryCountSizeAndDurationHasAnUpperBound) {
  const std::pair<const char*, const char*> beyond[] = {
      {"cluster.world_size=65537", "[cluster] world_size must be an integer from 0 to 65536"},
      {"cluster.collective_timeout_s=86401",
       "[cluster] collective_timeout_s must be a positive number of seconds up to 86400"},
      {"cluster.bootstrap_timeout_s=inf", "[cluster] bootstrap_timeout_s must be a positive number"},
      {"zero.reduce_bucket_size=1099511627777",
       "[zero] reduce_bucket_size must be a positive integer up to 2^40"},
      {"zero.max_reuse_distance=1099511627777",
       "[zero] max_reuse_distance must be an integer from 0 to 2^40"},
      {"offload.sub_group_size=1099511627777",
       "[offload] sub_group_size must be a positive integer up to 2^40"},
      {"offload.buffer_count=65", "[offload] buffer_count must be an integer from 2 to 64"},
      {"offload.block_size=2147483648",
       "[offload] block_size must be a positive multiple of 4096 up to 2^30"},
      {"offload.host_budget_bytes=1125899906842625",
       "[offload] host_budget_bytes must be an integer from 0 to 2^50"},
      {"batch.global_batch_size=1099511627777",
       "[batch] global_batch_size must be a positive integer up to 2^40"},
      {"model.seq_len=1048577", "[model] seq_len must be a positive integer up to 2^20"},
      {"model.n_heads=4097", "[model] n_heads must be a positive integer up to 2^12"},
      {"model.vocab_size=16777217",
       "[model] vocab_size must be an integer from 256 (byte-level data) to 2^24"},
      {"data.synthetic_bytes=68719476737",
       "[data] synthetic_bytes must be an integer greater than seq_len + 1, up to 2^36"},
      {"train.steps=1099511627777", "[train] steps must be a positive integer up to 2^40"},
      {"train.log_interval=1099511627777", "[train] log_interval must be a positive integer up to 2^40"},
      {"train.threads=1025", "[train] threads must be an integer from 0 to 1024"},
  };
  for (const auto& [setting, message] : beyond)
    EXPECT_NE(error_of(load(kMinimal, {setting})).find(message), std::string::npos)
        << setting << ": " << error_of(load(kMinimal, {setting}));
}

// ---- Resolution: model, optimizer, cluster, data, train ----

TEST(ConfigResolve, DModelMustBeDivisibleByHeads) {
  JobConfig raw = minimal_struct();
  raw.model.n_heads = 5;
  EXPECT_EQ(error_of(resolve_config(raw)), "<struct>: [model] d_model = 64 is not divisible by n_heads = 5");
}

TEST(ConfigResolve, ZeroDffBecomesFourTimesDModel) {
  Result<JobConfig> config = resolve_config(minimal_struct());
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->model.d_ff, 256);
}

TEST(ConfigResolve, VocabBelowByteRangeIsAnError) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[model]\nvocab_size = 100\n")),
            "job.toml:4:14: [model] vocab_size must be an integer from 256 (byte-level data) to "
            "2^24, got 100");
}

TEST(ConfigResolve, NonPositiveModelSizeIsAnError) {
  JobConfig raw = minimal_struct();
  raw.model.n_layers = 0;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [model] n_layers must be a positive integer up to 2^14, got 0");
}

TEST(ConfigResolve, ModelTypeMustBeAFamilyAndTyposAreSuggested) {
  JobConfig raw = minimal_struct();
  raw.model.type = "gtp";
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [model] type must be \"gpt\" or \"llama\", got \"gtp\"; did you mean \"gpt\"?");
  raw.model.type = "lama";
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [model] type must be \"gpt\" or \"llama\", got \"lama\"; did you mean \"llama\"?");
}

TEST(ConfigResolve, EachFamilyHasItsDefaultMlpWidthAndKeyValueHeads) {
  auto gpt = load(std::string(kMinimal) + "[model]\nd_model = 64\n");
  ASSERT_TRUE(gpt.ok()) << gpt.error().message;
  EXPECT_EQ(gpt->model.d_ff, 256);
  EXPECT_EQ(gpt->model.n_kv_heads, gpt->model.n_heads);
  // Meta's rule: 8/3 × 4096 = 10922.7, rounded up to a multiple of 256: LLaMA 2 7B's 11008.
  auto llama = load(std::string(kMinimal) + "[model]\ntype = \"llama\"\nd_model = 4096\nn_heads = 32\n");
  ASSERT_TRUE(llama.ok()) << llama.error().message;
  EXPECT_EQ(llama->model.d_ff, 11008);
  EXPECT_EQ(llama->model.n_kv_heads, 32);
}

TEST(ConfigResolve, KeyValueHeadsMustDivideTheQueryHeads) {
  const std::string llama = std::string(kMinimal) + "[model]\ntype = \"llama\"\nn_heads = 4\n";
  EXPECT_EQ(
      error_of(load(llama + "n_kv_heads = 3\n")),
      "job.toml:6:14: [model] n_kv_heads = 3 does not divide n_heads = 4: each key/value head serves the "
      "same number of query heads");
  EXPECT_EQ(error_of(load(llama + "n_kv_heads = 8\n")),
            "job.toml:6:14: [model] n_kv_heads must be an integer from 0 to n_heads that divides it (0 = "
            "n_heads), got 8");
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[model]\nn_kv_heads = 2\n")),
            "job.toml:4:14: [model] n_kv_heads = 2 with type = \"gpt\": the GPT attends with n_heads = 4 "
            "key/value heads; grouped-query attention is type = \"llama\"'s");
  EXPECT_EQ(
      error_of(load(llama + "d_model = 12\n")),
      "job.toml:5:11: [model] d_model / n_heads = 3 is odd: the rotary embedding rotates pairs of a head's "
      "dimensions, so a head's width must be even");
  EXPECT_EQ(
      error_of(load(llama + "rope_theta = 0\n")),
      "job.toml:6:14: [model] rope_theta must be a number above 0 (the rotary embedding's base), got 0.0");
}

// init_from = a Hugging Face folder: the [model] keys the job leaves out come from its
// config.json; a key the job gives stays (and the load names the difference).
TEST(ConfigResolve, AHuggingFaceFolderGivesTheModelKeysTheJobLeavesOut) {
  const std::string dir = ::testing::TempDir() + "troupe_config_test_hf";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "llama", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 96,)"
      << R"( "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,)"
      << R"( "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "tie_word_embeddings": true})";
  const std::string job = std::string(kMinimal) + "[model]\ninit_from = \"" + dir + "\"\n";
  auto loaded = load(job + "n_layers = 2\n");
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const ModelConfig& m = loaded->model;
  EXPECT_EQ(m.type, "llama");
  EXPECT_EQ(std::tuple(m.vocab_size, m.d_model, m.n_heads, m.n_kv_heads, m.d_ff),
            std::tuple(320, 64, 4, 2, 96));
  EXPECT_EQ(std::tuple(m.rope_theta, m.norm_eps, m.tie_embeddings), std::tuple(500000.0, 1e-6, true));
  EXPECT_EQ(m.n_layers, 2) << "the job's own key stays";
  std::ofstream(dir + "/config.json") << R"({"model_type": "mistral"})";
  EXPECT_EQ(error_of(load(job)),
            "job.toml:4:13: [model] " + dir +
                "/config.json: model_type = \"mistral\": troupe loads Hugging Face's \"llama\" "
                "and \"gpt2\" models");
}

TEST(ConfigResolve, TheActivationIsTheGptsToChoose) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[model]\nactivation = \"relu\"\n")),
            "job.toml:4:14: [model] activation must be \"gelu\" or \"gelu_tanh\", got \"relu\"");
  EXPECT_EQ(
      error_of(load(std::string(kMinimal) + "[model]\ntype = \"llama\"\nactivation = \"gelu_tanh\"\n")),
      "job.toml:5:14: [model] activation = \"gelu_tanh\" with type = \"llama\": LLaMA's MLP gates with silu "
      "(SwiGLU)");
  EXPECT_TRUE(load(std::string(kMinimal) + "[model]\nactivation = \"gelu_tanh\"\n").ok());
}

TEST(ConfigResolve, TensorParallelismSplitsTheKeyValueHeads) {
  EXPECT_EQ(
      error_of(load(std::string(kMinimal) +
                    "[cluster]\nworld_size = 4\n[parallel]\ntp = 4\n[model]\ntype = \"llama\"\n"
                    "n_heads = 4\nn_kv_heads = 2\n")),
      "job.toml:10:14: [model] n_kv_heads = 2 is not divisible by [parallel] tp = 4: tensor parallelism "
      "splits key/value heads evenly across the group");
}

TEST(ConfigResolve, LearningRateMustBePositive) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[optimizer]\nlr = -0.001\n")),
            "job.toml:4:6: [optimizer] lr must be a positive number, got -0.001");
}

TEST(ConfigResolve, LearningRateMustBeFinite) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[optimizer]\nlr = inf\n")),
            "job.toml:4:6: [optimizer] lr must be a positive number, got inf");
}

TEST(ConfigResolve, BetaOfOneIsAnError) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[optimizer]\nbetas = [0.9, 1]\n")),
            "job.toml:4:9: [optimizer] betas must be an array of two numbers [beta1, beta2], "
            "each at least 0 and below 1, got [0.9, 1.0]");
}

TEST(ConfigResolve, EpsMustBePositive) {
  JobConfig raw = minimal_struct();
  raw.optimizer.eps = 0;
  EXPECT_EQ(error_of(resolve_config(raw)), "<struct>: [optimizer] eps must be a positive number, got 0.0");
}

TEST(ConfigResolve, NegativeWeightDecayIsAnError) {
  JobConfig raw = minimal_struct();
  raw.optimizer.weight_decay = -1;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [optimizer] weight_decay must be a non-negative number, got -1.0");
}

TEST(ConfigResolve, NegativeMomentumIsAnError) {
  JobConfig raw = minimal_struct();
  raw.optimizer.momentum = -0.5;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [optimizer] momentum must be a non-negative number, got -0.5");
}

TEST(ConfigResolve, NesterovNeedsMomentum) {
  JobConfig raw = minimal_struct();
  raw.optimizer.nesterov = true;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [optimizer] nesterov = true needs a positive momentum, got momentum 0");
}

TEST(ConfigResolve, CoordinatorWithoutPortIsAnError) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[cluster]\ncoordinator = \"node0\"\n")),
            "job.toml:4:15: [cluster] coordinator must be a host:port string with a port from 1 "
            "to 65535, got \"node0\"");
}

TEST(ConfigResolve, CoordinatorPortOutOfRangeIsAnError) {
  JobConfig raw = minimal_struct();
  for (const char* coordinator : {"node0:0", "node0:65536", "node0:12a", ":80", "a:b:80"}) {
    raw.cluster.coordinator = coordinator;
    EXPECT_FALSE(resolve_config(raw).ok()) << coordinator;
  }
}

// An IPv6 coordinator is written bracketed, as clusters write it (the bootstrap's own
// socket serves either family: transport/bootstrap.hpp).
TEST(ConfigResolve, AnIpv6CoordinatorIsAccepted) {
  JobConfig raw = minimal_struct();
  for (const char* coordinator : {"[::1]:65535", "[fd00::1]:29500"}) {
    raw.cluster.coordinator = coordinator;
    auto resolved = resolve_config(raw);
    EXPECT_TRUE(resolved.ok()) << coordinator << ": " << resolved.error().message;
  }
}

// ---- The job token ----

// Sets TROUPE_TOKEN (or unsets it, for nullptr) for one test, and restores it.
class TokenVariable {
 public:
  explicit TokenVariable(const char* value) {
    if (const char* old = std::getenv(kTokenVariable)) saved_ = old;
    value ? setenv(kTokenVariable, value, 1) : unsetenv(kTokenVariable);
  }
  ~TokenVariable() { saved_ ? setenv(kTokenVariable, saved_->c_str(), 1) : unsetenv(kTokenVariable); }

 private:
  std::optional<std::string> saved_;
};

TEST(ConfigToken, NoneSetMeansNoSecret) {
  TokenVariable unset(nullptr);
  Result<JobConfig> config = load(kMinimal, {"cluster.token="});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->cluster.secret, "");
}

TEST(ConfigToken, ComesFromTheKeyTheFileOrTheEnvironmentInThatOrder) {
  TokenVariable from_environment("from-the-environment");
  EXPECT_EQ(load(kMinimal)->cluster.secret, "from-the-environment");
  const std::string file = write_temp_file("token_file", "from-the-file  \nsecond line\n");
  EXPECT_EQ(load(kMinimal, {"cluster.token_file=" + file})->cluster.secret, "from-the-file");
  EXPECT_EQ(load(kMinimal, {"cluster.token=from-the-key"})->cluster.secret, "from-the-key");
}

TEST(ConfigToken, TokenAndTokenFileTogetherAreRefused) {
  const std::string file = write_temp_file("token_file_both", "x\n");
  EXPECT_EQ(
      error_of(load(kMinimal, {"cluster.token=abc", "cluster.token_file=" + file})),
      "--set cluster.token_file=" + file + ": [cluster] token and token_file are both set; set one of them");
}

TEST(ConfigToken, ErrorsNeverShowTheToken) {
  const std::string long_token(1025, 'q');
  const std::string error = error_of(load(kMinimal, {"cluster.token=" + long_token}));
  EXPECT_EQ(error.find("qqqq"), std::string::npos) << error;
  EXPECT_EQ(error.find("--set cluster.token=(not shown)"), 0u) << error;
  EXPECT_NE(error.find("[cluster] token is 1025 bytes; a token may have at most 1024"), std::string::npos)
      << error;
  EXPECT_EQ(
      error_of(load(kMinimal, {"cluster.token=987654321"})),
      "--set cluster.token=(not shown): [cluster] token must be a string of at most 1024 bytes (empty = "
      "token_file, or $TROUPE_TOKEN), got a value not shown (an integer)");
  const std::string empty_file = write_temp_file("token_file_empty", "\n");
  EXPECT_NE(error_of(load(kMinimal, {"cluster.token_file=" + empty_file}))
                .find("the first line of [cluster] token_file " + empty_file + " is empty"),
            std::string::npos);
  EXPECT_NE(error_of(load(kMinimal, {"cluster.token_file=/nonexistent/token"}))
                .find("[cluster] token_file /nonexistent/token cannot be read: No such file or directory"),
            std::string::npos);
}

TEST(ConfigToken, RenderingShowsTheTokensLengthOnly) {
  Result<JobConfig> config = load(kMinimal, {"cluster.token=hunter2-very-secret"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  const std::string text = render_config(*config);
  EXPECT_EQ(text.find("hunter2"), std::string::npos) << text;
  EXPECT_NE(text.find("# token = (set, 19 bytes; a secret, not shown)\n"), std::string::npos) << text;
}

TEST(ConfigToken, RanksOnALoopbackCoordinatorMayGoWithoutOne) {
  ClusterConfig cluster;
  for (const char* host : {"127.0.0.1", "127.3.2.1", "localhost", "[::1]", "::1"}) {
    auto token = rank_token(cluster, host);
    ASSERT_TRUE(token.ok()) << host;
    EXPECT_EQ(*token, kLoopbackToken);
  }
  cluster.coordinator = "10.0.0.7:29500";
  for (const char* host : {"10.0.0.7", "node7", "128.0.0.1", "[::2]"}) {
    auto token = rank_token(cluster, host);
    ASSERT_FALSE(token.ok()) << host;
    EXPECT_NE(token.error().message.find(std::string("this rank refuses to start: the coordinator's host ") +
                                         host + " is not a loopback address and the job has no token"),
              std::string::npos)
        << token.error().message;
  }
  cluster.secret = "given";
  EXPECT_EQ(*rank_token(cluster, "10.0.0.7"), "given");
}

TEST(ConfigToken, RandomTokensAre64HexDigitsAndDiffer) {
  auto a = random_token(), b = random_token();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  EXPECT_NE(*a, *b);
}

TEST(ConfigToken, ConstantTimeEqualityIsEquality) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secret2"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_FALSE(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST(ConfigResolve, TimeoutsMustBePositive) {
  JobConfig raw = minimal_struct();
  raw.cluster.peer_timeout_s = 0;
  EXPECT_EQ(
      error_of(resolve_config(raw)),
      "<struct>: [cluster] peer_timeout_s must be a positive number of seconds up to 86400 (a day), got 0.0");
}

TEST(ConfigResolve, ReduceBucketMustBePositive) {
  JobConfig raw = minimal_struct();
  raw.zero.reduce_bucket_size = 0;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [zero] reduce_bucket_size must be a positive integer up to 2^40 (elements), got 0");
}

TEST(ConfigResolve, LogIntervalMustBeAtLeastOne) {
  JobConfig raw = minimal_struct();
  raw.train.log_interval = 0;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [train] log_interval must be a positive integer up to 2^40, got 0");
}

TEST(ConfigResolve, NegativeThreadsIsAnError) {
  JobConfig raw = minimal_struct();
  raw.train.threads = -1;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [train] threads must be an integer from 0 to 1024 (0 = automatic), got -1");
}

TEST(ConfigResolve, PrefetchMustBeAtLeastOne) {
  JobConfig raw = minimal_struct();
  raw.data.prefetch_micro_batches = 0;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [data] prefetch_micro_batches must be an integer from 1 to 1024, got 0");
}

TEST(ConfigResolve, SyntheticCorpusMustHoldOneSample) {
  JobConfig raw = minimal_struct();
  raw.data.synthetic_bytes = 65;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [data] synthetic_bytes must be greater than seq_len + 1 = 65, got 65");
}

TEST(ConfigResolve, MissingDataFileIsNamed) {
  JobConfig raw = minimal_struct();
  raw.data.path = "/nonexistent/corpus.txt";
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [data] path \"/nonexistent/corpus.txt\" does not exist");
}

TEST(ConfigResolve, DataPathThatIsADirectoryIsAnError) {
  JobConfig raw = minimal_struct();
  raw.data.path = ::testing::TempDir();
  EXPECT_NE(error_of(resolve_config(raw)).find("is not a regular file"), std::string::npos);
}

TEST(ConfigResolve, DataFileShorterThanOneSampleIsAnError) {
  JobConfig raw = minimal_struct();
  raw.data.path = write_temp_file("short.txt", std::string(65, 'x'));
  EXPECT_EQ(error_of(resolve_config(raw)),
            "<struct>: [data] path \"" + raw.data.path +
                "\" holds 65 bytes, but one sample needs more than seq_len + 1 = 65");
}

TEST(ConfigResolve, DataFileWithOneSampleIsAccepted) {
  JobConfig raw = minimal_struct();
  raw.data.path = write_temp_file("one_sample.txt", std::string(66, 'x'));
  EXPECT_TRUE(resolve_config(raw).ok());
}

TEST(ConfigResolve, StructErrorsNameTheSourceAndTheKey) {
  JobConfig raw = minimal_struct();
  raw.source = "trainer.cpp";
  raw.train.steps = 0;
  EXPECT_EQ(error_of(resolve_config(raw)),
            "trainer.cpp: [train] steps must be a positive integer up to 2^40, got 0");
}

TEST(ConfigResolve, ResolvedConfigResolvesToItself) {
  Result<JobConfig> once = resolve_config(minimal_struct());
  ASSERT_TRUE(once.ok()) << once.error().message;
  Result<JobConfig> twice = resolve_config(*once);
  ASSERT_TRUE(twice.ok()) << twice.error().message;
  expect_same(*once, *twice);
}

// ---- ZeRO and gradient clipping ----

TEST(ConfigZero, DefaultsAreTheDocumentedOnes) {
  const JobConfig defaults;
  EXPECT_EQ(defaults.zero.stage, 0);
  EXPECT_EQ(defaults.zero.reduce_bucket_size, 6553600);  // 25 MiB of fp32
  EXPECT_TRUE(defaults.zero.overlap_comm);
  EXPECT_EQ(defaults.zero.prefetch_bucket_size, 50000000);
  EXPECT_EQ(defaults.zero.max_live_parameters, 1000000000);
  EXPECT_EQ(defaults.zero.max_reuse_distance, 1000000000);
  EXPECT_EQ(defaults.zero.param_persistence_threshold, 100000);
  EXPECT_EQ(defaults.optimizer.gradient_clipping, 0.0);
}

TEST(ConfigZero, EveryKeyOfTheSectionIsRead) {
  Result<JobConfig> config = load(std::string(kMinimal) + R"(
[zero]
stage = 3
reduce_bucket_size = 1000
overlap_comm = false
prefetch_bucket_size = 2000
max_live_parameters = 3000
max_reuse_distance = 0
param_persistence_threshold = 0
[optimizer]
gradient_clipping = 1
)");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->zero.stage, 3);
  EXPECT_EQ(config->zero.reduce_bucket_size, 1000);
  EXPECT_FALSE(config->zero.overlap_comm);
  EXPECT_EQ(config->zero.prefetch_bucket_size, 2000);
  EXPECT_EQ(config->zero.max_live_parameters, 3000);
  EXPECT_EQ(config->zero.max_reuse_distance, 0);
  EXPECT_EQ(config->zero.param_persistence_threshold, 0);
  EXPECT_EQ(config->optimizer.gradient_clipping, 1.0);
}

TEST(ConfigZero, EveryStageFromZeroToThreeIsAccepted) {
  for (int64_t stage = 0; stage <= 3; ++stage) {
    JobConfig raw = minimal_struct();
    raw.zero.stage = stage;
    Result<JobConfig> config = resolve_config(raw);
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->zero.stage, stage);
  }
}

TEST(ConfigZero, OutOfRangeValuesNamePositionKeyAndAllowedValues) {
  const std::pair<const char*, const char*> cases[] = {
      {"[zero]\nstage = 4\n", "job.toml:4:9: [zero] stage must be one of 0, 1, 2 or 3, got 4"},
      {"[zero]\nstage = -1\n", "job.toml:4:9: [zero] stage must be one of 0, 1, 2 or 3, got -1"},
      {"[zero]\nreduce_bucket_size = 0\n",
       "job.toml:4:22: [zero] reduce_bucket_size must be a positive integer up to 2^40 (elements), got 0"},
      {"[zero]\nprefetch_bucket_size = -5\n",
       "job.toml:4:24: [zero] prefetch_bucket_size must be a positive integer up to 2^40 (elements), got -5"},
      {"[zero]\nmax_live_parameters = 0\n",
       "job.toml:4:23: [zero] max_live_parameters must be a positive integer up to 2^40 (elements), got 0"},
      {"[zero]\nmax_reuse_distance = -1\n",
       "job.toml:4:22: [zero] max_reuse_distance must be an integer from 0 to 2^40 (elements), got -1"},
      {"[zero]\nparam_persistence_threshold = -1\n",
       "job.toml:4:31: [zero] param_persistence_threshold must be an integer from 0 to 2^40 (elements), "
       "got -1"},
      {"[optimizer]\ngradient_clipping = -1.0\n",
       "job.toml:4:21: [optimizer] gradient_clipping must be a non-negative number (0 = no clipping), "
       "got -1.0"},
  };
  for (const auto& [section, message] : cases) {
    EXPECT_EQ(error_of(load(std::string(kMinimal) + section)), message) << section;
  }
}

TEST(ConfigZero, GradientClippingMustBeFinite) {
  JobConfig raw = minimal_struct();
  raw.optimizer.gradient_clipping = std::numeric_limits<double>::infinity();
  EXPECT_EQ(
      error_of(resolve_config(raw)),
      "<struct>: [optimizer] gradient_clipping must be a non-negative number (0 = no clipping), got inf");
}

TEST(ConfigZero, OverlapCommRejectsAnInteger) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[zero]\noverlap_comm = 1\n")),
            "job.toml:4:16: [zero] overlap_comm must be true or false, got 1 (an integer)");
}

TEST(ConfigZero, OverrideSetsTheStage) {
  Result<JobConfig> config = load(kMinimal, {"zero.stage=2"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->zero.stage, 2);
}

TEST(ConfigZero, OverrideOutOfRangeNamesTheOverrideText) {
  EXPECT_EQ(error_of(load(kMinimal, {"zero.stage=5"})),
            "--set zero.stage=5: [zero] stage must be one of 0, 1, 2 or 3, got 5");
}

TEST(ConfigZero, UnknownKeySuggestsTheClosestKey) {
  EXPECT_EQ(error_of(load(std::string(kMinimal) + "[zero]\nstge = 1\n")),
            "job.toml:4:1: unknown key [zero] stge; did you mean stage?");
}

TEST(ConfigZero, RenderedConfigWithNonDefaultValuesRoundTrips) {
  Result<JobConfig> resolved = load(
      kMinimal, {"zero.stage=3", "zero.reduce_bucket_size=16384", "zero.overlap_comm=false",
                 "zero.prefetch_bucket_size=123", "zero.max_live_parameters=456", "zero.max_reuse_distance=0",
                 "zero.param_persistence_threshold=789", "optimizer.gradient_clipping=0.5"});
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;
  const std::string text = render_config(*resolved);
  EXPECT_NE(text.find("\n[zero]\nstage = 3\nreduce_bucket_size = 16384\noverlap_comm = false\n"
                      "prefetch_bucket_size = 123\nmax_live_parameters = 456\nmax_reuse_distance = 0\n"
                      "param_persistence_threshold = 789\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\ngradient_clipping = 0.5\n"), std::string::npos) << text;
  Result<JobConfig> reloaded = load(text);
  ASSERT_TRUE(reloaded.ok()) << reloaded.error().message << "\n" << text;
  expect_same(*resolved, *reloaded);
}

// ---- Rendering ----

TEST(ConfigRender, RoundTripGivesAnEqualConfig) {
  JobConfig raw;
  raw.source = "job.toml";
  raw.cluster = {0,
                 "node3:7000",
                 "",
                 write_temp_file("token \"with\\ escapes", "s3cret\n"),
                 1.5,
                 0.25,
                 7,
                 Topology::two_level,
                 "rack-2/node-3",
                 DeviceKind::cpu,
                 false,
                 ""};
  raw.parallel = {2, 1, 1};
  raw.zero = {1, 12345, false, 6, 7, 8, 9};
  raw.batch = {3, 0, 12};
  raw.optimizer = {OptimizerType::sgd, 3e-4, 0.1, 0.2, 1e-12, 0, 0.9, true, 0.75};
  raw.model = {"gpt", 300, 10, 12, 1, 3, 0, 0, 10000.0, 1e-5, "gelu_tanh", false, false, "start.pt"};
  raw.data = {write_temp_file("round_trip.txt", std::string(100, 'y')), 99, 4, {}, {}, {}};
  raw.train = {5, -9, 3, 2, "metrics é.jsonl", 4};
  raw.checkpoint = {"ckpt dir", 5, 3, false, "latest"};
  raw.trace = {"trace.json"};
  Result<JobConfig> resolved = resolve_config(raw);
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;
  const std::string text = render_config(*resolved);
  Result<JobConfig> reloaded = load_config_string(text, "job.toml", {});
  ASSERT_TRUE(reloaded.ok()) << reloaded.error().message << "\n" << text;
  expect_same(*resolved, *reloaded);
}

TEST(ConfigRender, DefaultConfigRoundTrips) {
  Result<JobConfig> resolved = load(kMinimal);
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;
  Result<JobConfig> reloaded = load(render_config(*resolved));
  ASSERT_TRUE(reloaded.ok()) << reloaded.error().message;
  expect_same(*resolved, *reloaded);
}

TEST(ConfigRender, ShowsTheBatchArithmetic) {
  Result<JobConfig> config = load(kMinimal, {"parallel.dp=2"});
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_NE(render_config(*config).find("# derived: global = micro 4 × accumulation 1 × dp 2\n"
                                        "global_batch_size = 8\n"),
            std::string::npos);
}

TEST(ConfigRender, ListsEverySection) {
  const std::string text = render_config(JobConfig{});
  for (const char* section : {"[cluster]", "[parallel]", "[zero]", "[offload]", "[batch]", "[optimizer]",
                              "[model]", "[data]", "[train]", "[trace]", "[monitor]"}) {
    EXPECT_NE(text.find(section), std::string::npos) << section;
  }
}

TEST(ConfigRender, WritesWholeFloatsAsTomlFloats) {
  JobConfig config;
  config.optimizer.lr = 2;
  EXPECT_NE(render_config(config).find("lr = 2.0\n"), std::string::npos);
}

// ---- Suggestions ----

TEST(ConfigSuggest, SwappedNeighboursCountAsOneEdit) {
  EXPECT_EQ(edit_distance("gtp", "gpt"), 1u);
  EXPECT_EQ(edit_distance("micro_bach_size", "micro_batch_size"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

TEST(ConfigSuggest, PicksTheClosestCandidate) {
  EXPECT_EQ(suggest("sdg", {"adamw", "adam", "sgd"}), std::optional<std::string>("sgd"));
}

TEST(ConfigSuggest, SuggestsNothingWhenNoCandidateIsClose) {
  EXPECT_EQ(suggest("learning_rate", {"lr", "eps"}), std::nullopt);
}

TEST(ConfigSuggest, ShortWordsNeedACloserMatch) {
  EXPECT_EQ(suggest("xy", {"dp", "pp"}), std::nullopt);
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TEST(ConfigLoad, UnknownTopologyIsRefusedNamingTheAllowedOnes) {
  auto r =
      load_config_string("[cluster]\ntopology = \"ring\"\n[batch]\nmicro_batch_size = 1\n", "job.toml", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("job.toml:2:"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("\"two_level\""), std::string::npos) << r.error().message;
}

// The sentence a named-choice key's error gives lists the names its enum has, every one:
// the key table's words and choices.cpp's spellings cannot drift apart.
TEST(ConfigLoad, EachNamedChoiceSaysEveryNameItTakes) {
  int choices = 0;
  for (const KeySpec& spec : key_specs()) {
    JobConfig probe;
    const FieldRef field = spec.field(probe);
    if (!std::holds_alternative<ChoiceRef>(field)) continue;
    ++choices;
    for (const std::string& name : *std::get<ChoiceRef>(field).names) {
      if (name.empty()) continue;
      EXPECT_NE(spec.expect.find("\"" + name + "\""), std::string_view::npos)
          << "[" << spec.section << "] " << spec.key << " does not name \"" << name << "\": " << spec.expect;
    }
  }
  EXPECT_GE(choices, 11);
}

// A key of a few names is an enum from the moment the job loads: a misspelling is refused
// at its line with the names allowed, and a guess where the word is long enough to be a typo.
TEST(ConfigLoad, NamedChoicesAreRefusedAtTheirLineWithTheNamesAllowed) {
  const std::string batch = "[batch]\nmicro_batch_size = 1\n";
  EXPECT_EQ(
      load_config_string("[scheduler]\ntype = \"WarmupCosine\"\n" + batch, "job.toml", {}).error().message,
      "job.toml:2:8: [scheduler] type must be one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\" or "
      "\"OneCycle\" (\"\" = a constant lr), got \"WarmupCosine\"; did you mean \"WarmupCosineLR\"?");
  EXPECT_EQ(
      load_config_string("[scheduler]\nwarmup_type = \"exp\"\n" + batch, "job.toml", {}).error().message,
      "job.toml:2:15: [scheduler] warmup_type must be one of \"log\" or \"linear\", got \"exp\"");
  EXPECT_EQ(load_config_string("[offload]\noptimizer = \"nvmee\"\n" + batch, "job.toml", {}).error().message,
            "job.toml:2:13: [offload] optimizer must be one of \"none\", \"cpu\" or \"nvme\", got \"nvmee\"; "
            "did you "
            "mean \"nvme\"?");
  EXPECT_EQ(load_config_string("[pipeline]\npartition = \"flopz\"\n" + batch, "job.toml", {}).error().message,
            "job.toml:2:13: [pipeline] partition must be one of \"flops\", \"uniform\", \"parameters\" or "
            "\"profile\", or an array of layer counts by stage, got \"flopz\"; did you mean \"flops\"?");
  EXPECT_EQ(load_config_string("[parallel]\norder = \"pp-dp\"\n" + batch, "job.toml", {}).error().message,
            "job.toml:2:9: [parallel] order must be one of \"pp,dp\" or \"dp,pp\" (the fastest-varying axis "
            "first), "
            "got \"pp-dp\"; did you mean \"pp,dp\"?");
  EXPECT_EQ(
      load_config_string("[precision]\ndtype = 16\n" + batch, "job.toml", {}).error().message,
      "job.toml:2:9: [precision] dtype must be one of \"fp32\", \"bf16\" or \"fp16\", got 16 (an integer)");
  auto linear = load_config_string("[scheduler]\ntype = \"WarmupLR\"\nwarmup_type = \"linear\"\n" + batch,
                                   "job.toml", {});
  ASSERT_TRUE(linear.ok()) << linear.error().message;
  EXPECT_EQ(linear->scheduler.type, LrScheduleType::warmup_lr);
  EXPECT_EQ(linear->scheduler.warmup_type, WarmupType::linear);
  EXPECT_EQ(linear->precision.communication_data_type, std::nullopt);
  EXPECT_EQ(linear->precision.reduce_dtype(), Dtype::fp32);
}

// ---- [cluster] device ----

TEST(ConfigDevice, GpusAreSharedOnlyOnCuda) {
  auto shared = load("[cluster]\ndevice = \"cuda\"\nshare_gpus = true\n[batch]\nmicro_batch_size = 2\n");
  ASSERT_TRUE(shared.ok()) << shared.error().message;
  EXPECT_TRUE(shared->cluster.share_gpus);
  EXPECT_EQ(
      error_of(load("[cluster]\nshare_gpus = true\n[batch]\nmicro_batch_size = 2\n")),
      "job.toml:2:14: [cluster] share_gpus = true shares GPUs among ranks, but [cluster] device = \"cpu\": "
      "set device = \"cuda\" or drop share_gpus");
}

TEST(ConfigDevice, CpuOrCudaAndNothingElse) {
  auto cuda = load("[cluster]\ndevice = \"cuda\"\n[batch]\nmicro_batch_size = 2\n");
  ASSERT_TRUE(cuda.ok()) << cuda.error().message;
  EXPECT_EQ(cuda->cluster.device, DeviceKind::cuda);
  EXPECT_EQ(error_of(load("[cluster]\ndevice = \"gpu\"\n[batch]\nmicro_batch_size = 2\n")),
            "job.toml:2:10: [cluster] device must be one of \"cpu\" or \"cuda\", got \"gpu\"");
}

TEST(Devices, OneGpuPerLocalRankOrAClearError) {
  EXPECT_TRUE(check_cuda_devices(Result<int>(2), 1, 2).ok());
  EXPECT_EQ(
      check_cuda_devices(Result<int>(1), 1, 2).error().message,
      "[cluster] device = \"cuda\" gives each rank a GPU of its own, but this host runs 2 ranks and has 1 "
      "CUDA device (local rank 1 has none); run at most 1 rank per host, set [cluster] share_gpus = true to "
      "share them (collectives staged through host memory), or use device = \"cpu\"");
  // Shared: any GPU will do, each rank on local rank modulo the count.
  EXPECT_TRUE(check_cuda_devices(Result<int>(1), 1, 2, true).ok());
  EXPECT_EQ(gpu_of(3, 2), 1);
  EXPECT_EQ(check_cuda_devices(Result<int>(0), 0, 2, true).error().message,
            "[cluster] device = \"cuda\", but this host has no CUDA device; use device = \"cpu\"");
  EXPECT_EQ(check_cuda_devices(Result<int>(0), 0, 1).error().message,
            "[cluster] device = \"cuda\", but this host has no CUDA device; use device = \"cpu\"");
  EXPECT_EQ(check_cuda_devices(Result<int>(make_error("no driver")), 0, 1).error().message,
            "[cluster] device = \"cuda\", but no driver; use device = \"cpu\"");
}

// ---- [offload] ----

TEST(ConfigOffload, LoadsEveryKey) {
  auto config = load(
      "[zero]\nstage = 3\n[offload]\noptimizer = \"nvme\"\nparam = \"cpu\"\nnvme_path = \"/tmp/x\"\n"
      "host_budget_bytes = 1048576\nsub_group_size = 4096\nbuffer_count = 3\nblock_size = 8192\n"
      "queue_depth = 16\n[batch]\nmicro_batch_size = 2\n");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->offload.optimizer, OffloadTier::nvme);
  EXPECT_EQ(config->offload.param, OffloadTier::cpu);
  EXPECT_EQ(config->offload.nvme_path, "/tmp/x");
  EXPECT_EQ(config->offload.host_budget_bytes, 1048576);
  EXPECT_EQ(config->offload.sub_group_size, 4096);
  EXPECT_EQ(config->offload.buffer_count, 3);
  EXPECT_EQ(config->offload.block_size, 8192);
  EXPECT_EQ(config->offload.queue_depth, 16);
  auto swapped = load(
      "[zero]\nstage = 3\n[offload]\noptimizer = \"cpu\"\nparam = \"nvme\"\nnvme_path = \"/tmp/x\"\n"
      "[batch]\nmicro_batch_size = 2\n");
  ASSERT_TRUE(swapped.ok()) << swapped.error().message;
  EXPECT_EQ(swapped->offload.param, OffloadTier::nvme);
  // Stage 0 offloads the whole model's optimizer state.
  auto whole =
      load("[offload]\noptimizer = \"nvme\"\nnvme_path = \"/tmp/x\"\n[batch]\nmicro_batch_size = 2\n");
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(whole->zero.stage, 0);
}

TEST(ConfigOffload, BadValuesNameTheKeyAndWhatIsAllowed) {
  EXPECT_EQ(error_of(load("[zero]\nstage = 2\n[offload]\noptimizer = \"disk\"\n")),
            "job.toml:4:13: [offload] optimizer must be one of \"none\", \"cpu\" or \"nvme\", got \"disk\"");
  // ZeRO 1-3 on a GPU rank, with the optimizer state on the host; the parameter partition stays on the GPU.
  auto gpu_stage3 = load(
      "[cluster]\ndevice = \"cuda\"\n[zero]\nstage = 3\n[offload]\noptimizer = \"cpu\"\n[batch]\n"
      "micro_batch_size = 2\n");
  EXPECT_TRUE(gpu_stage3.ok()) << gpu_stage3.error().message;
  EXPECT_EQ(
      error_of(load("[cluster]\ndevice = \"cuda\"\n[zero]\nstage = 3\n[offload]\noptimizer = \"cpu\"\n"
                    "param = \"cpu\"\n[batch]\nmicro_batch_size = 2\n")),
      "job.toml:7:9: [offload] param = \"cpu\" with [cluster] device = \"cuda\": a GPU rank keeps its "
      "parameter "
      "partition in device memory so far (its optimizer state may go to the host or NVMe with [offload] "
      "optimizer); set param = \"none\"");
  auto gpu_offload =
      load("[cluster]\ndevice = \"cuda\"\n[offload]\noptimizer = \"cpu\"\n[batch]\nmicro_batch_size = 2\n");
  EXPECT_TRUE(gpu_offload.ok()) << gpu_offload.error().message;
  EXPECT_EQ(error_of(load("[zero]\nstage = 2\n[offload]\nparam = \"cpu\"\n")),
            "job.toml:4:9: [offload] param = \"cpu\" needs [zero] stage = 3 (only stage 3 partitions the "
            "parameters), got stage 2");
  EXPECT_EQ(
      error_of(load("[zero]\nstage = 1\n[offload]\noptimizer = \"nvme\"\n")),
      "job.toml:4:13: [offload] optimizer = \"nvme\" needs nvme_path, the directory of the nvme tier, but "
      "nvme_path is not set");
  EXPECT_EQ(error_of(load("[zero]\nstage = 3\n[offload]\nparam = \"nvme\"\nnvme_path = \"/tmp/x\"\n")),
            "job.toml:4:9: [offload] param = \"nvme\" needs optimizer = \"cpu\" or \"nvme\": the offload "
            "manager updates the parameters it swaps in from NVMe, so the optimizer must run there too");
  EXPECT_EQ(error_of(load("[zero]\nstage = 3\n[offload]\noptimizer = \"cpu\"\nparam = \"nvme\"\n")),
            "job.toml:5:9: [offload] param = \"nvme\" needs nvme_path, the directory of the nvme tier, but "
            "nvme_path is not set");
  EXPECT_EQ(
      error_of(load("[offload]\nblock_size = 1000\n")),
      "job.toml:2:14: [offload] block_size must be a positive multiple of 4096 up to 2^30 (bytes), got 1000");
  EXPECT_EQ(error_of(load("[offload]\nbuffer_count = 1\n")),
            "job.toml:2:16: [offload] buffer_count must be an integer from 2 to 64, got 1");
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TEST(ConfigResolve, PipelineTakesEveryZeroStageCheckpointingAndAGpu) {
  const std::string pipeline = "[cluster]\nworld_size = 2\n[parallel]\npp = 2\n[batch]\nmicro_batch_size = 1\n"
                               "gradient_accumulation_steps = 2\n";
  EXPECT_TRUE(load_config_string(pipeline + "[zero]\nstage = 3\n", "job.toml", {}).ok());
  EXPECT_TRUE(load_config_string(pipeline + "[model]\nactivation_checkpointing = true\n[zero]\nstage = 3\n",
                                 "job.toml", {})
                  .ok());
  // On GPU ranks: over NCCL (a group per stage's data-parallel group) or staged.
  for (const char* share : {"false", "true"}) {
    auto gpu = load_config_string(
        std::string("[cluster]\nworld_size = 4\ndevice = \"cuda\"\nshare_gpus = ") + share +
            "\n[parallel]\npp = 2\ndp = 2\n[batch]\nmicro_batch_size = 1\ngradient_accumulation_steps = 2\n"
            "[zero]\nstage = 2\n",
        "job.toml", {});
    EXPECT_TRUE(gpu.ok()) << gpu.error().message;
  }
}

// micro_batch_size = "auto": the largest micro-batch of a replica's share that fits the
// budget (DeepSpeed's autotuning without trial runs), the accumulation to match.
TEST(Config, AutoMicroBatchIsTheLargestThatFits) {
  const std::string job =
      "[cluster]\nworld_size = 2\n[parallel]\ndp = 2\n[batch]\nglobal_batch_size = 32\n"
      "micro_batch_size = \"auto\"\n[model]\nseq_len = 128\nd_model = 256\nn_layers = 4\nn_heads = 4\n";
  auto roomy = load(job, {"batch.memory_budget_bytes=100000000000"});
  ASSERT_TRUE(roomy) << roomy.error().message;
  EXPECT_EQ(roomy->batch.micro_batch_size, 16);
  EXPECT_EQ(roomy->batch.gradient_accumulation_steps, 1);
  ASSERT_FALSE(roomy->warnings.empty());
  EXPECT_NE(roomy->warnings.back().find("micro_batch_size = \"auto\" chose 16"), std::string::npos);
  // A budget between what 8 and 16 sequences need: 8, twice.
  JobConfig eight = *roomy;
  eight.batch.micro_batch_size = 8;
  eight.batch.gradient_accumulation_steps = 2;
  auto need8 = peak_rank_bytes(eight), need16 = peak_rank_bytes(*roomy);
  ASSERT_TRUE(need8 && need16);
  ASSERT_LT(*need8, *need16);
  auto tight = load(job, {"batch.memory_budget_bytes=" + std::to_string((*need8 + *need16) / 2)});
  ASSERT_TRUE(tight) << tight.error().message;
  EXPECT_EQ(tight->batch.micro_batch_size, 8);
  EXPECT_EQ(tight->batch.gradient_accumulation_steps, 2);
  // Resolving it again (the engine does) keeps the choice.
  auto again = resolve_config(*tight);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->batch.micro_batch_size, 8);
  // Rendered, it loads back as the number chosen.
  auto reloaded = load_config_string(render_config(*tight), "job.toml", {});
  ASSERT_TRUE(reloaded) << reloaded.error().message;
  EXPECT_EQ(reloaded->batch.micro_batch_size, 8);

  auto none = load(job, {"batch.memory_budget_bytes=1000"});
  ASSERT_FALSE(none);
  EXPECT_NE(
      none.error().message.find("job.toml:7:20: [batch] micro_batch_size = \"auto\": no micro-batch fits"),
      std::string::npos)
      << none.error().message;
  auto no_global = load("[batch]\nmicro_batch_size = \"auto\"\n");
  ASSERT_FALSE(no_global);
  EXPECT_NE(no_global.error().message.find("set global_batch_size"), std::string::npos)
      << no_global.error().message;
  auto both = load(job, {"batch.gradient_accumulation_steps=2"});
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("chooses gradient_accumulation_steps too"), std::string::npos);
  auto typo = load("[batch]\nmicro_batch_size = \"autoo\"\n");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("must be a positive integer up to 2^20, or \"auto\", got \"autoo\""),
            std::string::npos)
      << typo.error().message;
}

// A GPU rank's job against its GPU's free memory: refused with the estimate, the free
// bytes and the keys that would make it fit; the same job fits a larger GPU, and a job
// with every key already used names none of them.
TEST(Config, AJobTooBigForTheGpuIsRefusedWithTheKeysThatWouldMakeItFit) {
  const std::string job =
      "[cluster]\nworld_size = 2\ndevice = \"cuda\"\n[parallel]\ndp = 2\n[batch]\nmicro_batch_size = 4\n"
      "[model]\nseq_len = 128\nd_model = 256\nn_layers = 4\nn_heads = 4\n";
  auto config = load(job);
  ASSERT_TRUE(config) << config.error().message;
  auto estimate = estimate_job(*config);
  ASSERT_TRUE(estimate) << estimate.error().message;
  EXPECT_EQ(estimate->tier, "device");
  EXPECT_EQ(estimate->optimizer_state_tier, "device");
  EXPECT_EQ(estimate->device_bytes,
            estimate->bytes.model_state() + estimate->bytes[MemoryKind::communication]);
  EXPECT_TRUE(check_fits_device(*config, int64_t{80} << 30, 1, "GPU 0").ok());
  Status small = check_fits_device(*config, estimate->device_bytes / 2, 1, "GPU 0");
  ASSERT_FALSE(small.ok());
  const std::string& m = small.error().message;
  EXPECT_NE(m.find("job.toml: the job needs about"), std::string::npos) << m;
  EXPECT_NE(m.find("of GPU 0's memory"), std::string::npos) << m;
  EXPECT_NE(
      m.find("to fit, set a higher [zero] stage (now 0), or [offload] optimizer = \"cpu\" or \"nvme\", "
             "or a smaller [batch] micro_batch_size (now 4), or [model] activation_checkpointing = true"),
      std::string::npos)
      << m;
  // Twice what one rank needs (all of its peak is on the device): one rank fits, three
  // sharing the GPU do not.
  auto one_rank = peak_rank_bytes(*config);
  ASSERT_TRUE(one_rank);
  EXPECT_TRUE(check_fits_device(*config, 2 * *one_rank, 1, "GPU 0").ok());
  Status shared = check_fits_device(*config, 2 * *one_rank, 3, "GPU 0");
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.error().message.find("3 ranks on it"), std::string::npos) << shared.error().message;
  EXPECT_NE(
      shared.error().message.find("[cluster] share_gpus = false with a GPU per rank (now 3 ranks share it)"),
      std::string::npos)
      << shared.error().message;
  // The optimizer on the host: the estimate's device bytes leave it out.
  auto offloaded = load(job, {"offload.optimizer=\"cpu\"", "zero.stage=3", "batch.micro_batch_size=1",
                              "model.activation_checkpointing=true"});
  ASSERT_TRUE(offloaded) << offloaded.error().message;
  auto host_state = estimate_job(*offloaded);
  ASSERT_TRUE(host_state);
  EXPECT_EQ(host_state->optimizer_state_tier, "host");
  EXPECT_EQ(host_state->device_bytes, host_state->bytes.model_state() +
                                          host_state->bytes[MemoryKind::communication] -
                                          host_state->bytes[MemoryKind::optimizer_state]);
  Status none = check_fits_device(*offloaded, 1000, 1, "GPU 0");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("does not fit this GPU at any setting troupe has"), std::string::npos)
      << none.error().message;
}

}  // namespace
}  // namespace troupe
