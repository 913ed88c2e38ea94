// DeepSpeed configs taken as they are: ten shapes of ds_config.json seen in real use
// (tests/data/deepspeed: ZeRO 0-3, optimizer offload to the CPU and to NVMe with its aio
// keys, each of DeepSpeed's four learning-rate schedules, Adam in both of its modes, SGD,
// monitoring sections, bf16, fp16 with its dynamic loss scaler) are converted and trained
// for a few steps on 2 ranks (the fp16 one in bf16: fp16 compute needs CUDA kernels); `troupe
// check --toml` shows what each became. What troupe ignores is a warning naming the key;
// what it cannot run is refused in one message naming every such key; a JSON syntax
// error names its line and column, a value of the wrong type its key path.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

std::string data(const std::string& name) {
  return std::string(TROUPE_SOURCE_DIR) + "/tests/data/deepspeed/" + name;
}

struct Shape {
  Shape(std::string f, std::vector<std::string> t, std::string s = "")
      : file(std::move(f)), toml(std::move(t)), settings(std::move(s)) {}
  std::string file;
  std::vector<std::string> toml;  ///< lines `troupe check --toml` must print
  std::string settings;           ///< more --set flags for both commands
};

std::vector<Shape> shapes() {
  return {
      {"zero1_warmup.json", {"stage = 1", "type = \"WarmupLR\"", "warmup_num_steps = 3", "log_interval = 1"}},
      {"zero2_hf.json",
       {"stage = 2", "type = \"adamw\"", "betas = [0.9, 0.95]", "type = \"WarmupDecayLR\"",
        "gradient_clipping = 1.0", "reduce_bucket_size = 200000000"}},
      {"zero3_cosine.json",
       {"stage = 3", "type = \"WarmupCosineLR\"", "param_persistence_threshold = 1000",
        "prefetch_bucket_size = 50000"}},
      {"zero2_offload_cpu_onecycle.json",
       {"optimizer = \"cpu\"", "type = \"OneCycle\"", "cycle_max_mom = 0.99"}},
      {"zero3_offload_nvme.json", {"param = \"nvme\"", "optimizer = \"nvme\"", "block_size = 1048576"}},
      {"zero0_sgd.json", {"stage = 0", "type = \"sgd\"", "nesterov = true"}},
      {"adam_l2_clipping.json",
       {"type = \"adam\"", "gradient_clipping = 0.5", "gradient_accumulation_steps = 4"}},
      {"monitoring.json", {"stage = 1", "type = \"adamw\"", "tensorboard = \"logs/gpt\""}},
      {"zero3_bf16.json", {"dtype = \"bf16\"", "communication_data_type = \"bf16\"", "stage = 3"}},
      {"zero1_fp16_dynamic.json",
       {"dtype = \"fp16\"", "initial_scale_power = 12", "loss_scale_window = 500", "hysteresis = 2"}},
      // Shapes of DeepSpeed's own examples and Hugging Face's documented configs: "auto"
      // values, the legacy cpu_offload, DeepSpeed's new ZeRO names, prescale_gradients,
      // pipelined NVMe swapping, "bfloat16", Megatron's pipeline and curriculum sections.
      {"hf_zero3_auto.json",
       {"stage = 3", "type = \"WarmupLR\"", "max_live_parameters = 1000000000"},
       " --set batch.micro_batch_size=4"},
      {"legacy_cpu_offload.json", {"optimizer = \"cpu\"", "dtype = \"bf16\"", "stage = 2"}},
      {"zero_infinity_nvme.json",
       {"optimizer = \"nvme\"", "param = \"cpu\"", "prefetch_bucket_size = 50000"}},
      {"bing_bert_style.json", {"type = \"WarmupDecayLR\"", "gradient_clipping = 1.0"}},
      {"megatron_gpt_style.json", {"dtype = \"bf16\"", "stage = 1", "communication_data_type = \"bf16\""}},
  };
}

TEST(DeepSpeedConfig, RealWorldConfigsConvertAndTrain) {
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.file);
    const std::string dir = testing::make_temp_dir();
    const std::string common = " --set cluster.world_size=2 --set offload.nvme_path=" + dir + shape.settings;
    auto checked = testing::run_command(
        std::string(TROUPE_BINARY) + " check " + data(shape.file) + common + " --toml", 60);
    ASSERT_EQ(checked.exit_code, 0) << checked.output;
    for (const std::string& line : shape.toml)
      EXPECT_NE(checked.output.find(line), std::string::npos) << line;
    auto trained = testing::run_command(
        std::string(TROUPE_BINARY) + " run " + data(shape.file) + common +
            " --set train.steps=4 --set cluster.coordinator=" + testing::free_coordinator() + " --metrics " +
            dir + "/metrics.jsonl --set monitor.tensorboard=\\\"" + dir + "/tb\\\"",
        180);
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    std::vector<nlohmann::json> steps;
    std::istringstream lines(testing::read_file(dir + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) steps.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(steps.size(), 4u) << trained.output;
    for (const auto& step : steps) EXPECT_TRUE(std::isfinite(step.at("loss").get<double>()));
    EXPECT_EQ(testing::run_command("ls " + dir + "/tb | grep -q tfevents").exit_code, 0)
        << "no TensorBoard file";
  }
}

TEST(DeepSpeedConfig, IgnoredKeysAreWarningsNamingThem) {
  auto r = testing::run_command(
      std::string(TROUPE_BINARY) + " check " + data("monitoring.json") + " --set cluster.world_size=2", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"flops_profiler is ignored", "wall_clock_breakdown is ignored",
                          "activation_checkpointing is ignored"})
    EXPECT_NE(r.output.find(key), std::string::npos) << key << " in " << r.output;
  EXPECT_EQ(r.output.find("fp16"), std::string::npos) << "a disabled fp16 section is not worth a word";
}

testing::CommandResult check_json(const std::string& json, const std::string& settings = "") {
  const std::string file = testing::make_temp_dir() + "/ds_config.json";
  testing::write_file(file, json);
  return testing::run_command(
      std::string(TROUPE_BINARY) + " check " + file + " --set cluster.world_size=2" + settings, 60);
}

void expect_refused(const testing::CommandResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "missing \"" << needle << "\" in: " << r.output;
}

TEST(DeepSpeedConfig, WhatTroupeCannotRunIsRefusedInOneMessageNamingEveryKey) {
  auto r = check_json(R"({
  "train_batch_size": 16,
  "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}},
  "fp16": {"enabled": true},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}},
  "sparse_attention": {"mode": "fixed"}
})");
  expect_refused(r, "does not run 3 keys of this DeepSpeed config");
  for (const char* key : {"optimizer.type (\"Lamb\": troupe has Adam, AdamW and SGD)",
                          "sparse_attention (troupe's attention is dense causal attention)",
                          "zero_optimization.offload_optimizer.ratio"})
    expect_refused(r, key);
  expect_refused(
      check_json(R"({"train_batch_size": 16, "zero_optimization": {"stage": "auto"}})"),
      "zero_optimization.stage (\"auto\" is filled in by Hugging Face's integration, not by DeepSpeed");
}

// Every key of DeepSpeed's current schema is known: converted, ignored saying why, or refused
// saying why (some only at a value that asks for what troupe lacks); "auto" takes the job's
// value where troupe has the key; a key DeepSpeed would not know either gets a did-you-mean.
TEST(DeepSpeedConfig, TheWholeSchemaIsKnownAndAutoTakesTheJobs) {
  auto automatic = testing::run_command(
      std::string(TROUPE_BINARY) + " check " + data("hf_zero3_auto.json") +
          " --set cluster.world_size=2 --set batch.micro_batch_size=4 --set optimizer.lr=2e-4",
      60);
  ASSERT_EQ(automatic.exit_code, 0) << automatic.output;
  for (const char* said :
       {"train_micro_batch_size_per_gpu is \"auto\": it takes the job's [batch] micro_batch_size",
        "optimizer.params.lr is \"auto\": it takes the job's [optimizer] lr",
        "bf16.enabled is \"auto\": it takes the job's [precision] dtype", "lr = 0.0002",
        "micro_batch_size = 4"})
    EXPECT_NE(automatic.output.find(said), std::string::npos) << said << " in " << automatic.output;
  auto bert = testing::run_command(
      std::string(TROUPE_BINARY) + " check " + data("bing_bert_style.json") + " --set cluster.world_size=2",
      60);
  ASSERT_EQ(bert.exit_code, 0) << bert.output;
  EXPECT_NE(
      bert.output.find("prescale_gradients is ignored: troupe always divides each replica's loss by dp"),
      std::string::npos)
      << bert.output;
  auto nvme = testing::run_command(
      std::string(TROUPE_BINARY) + " check " + data("zero_infinity_nvme.json") +
          " --set cluster.world_size=2 --set offload.nvme_path=" + testing::make_temp_dir(),
      60);
  ASSERT_EQ(nvme.exit_code, 0) << nvme.output;
  EXPECT_NE(
      nvme.output.find("offload_optimizer.pipeline_read is ignored: troupe's offload manager always reads"),
      std::string::npos)
      << nvme.output;
  expect_refused(check_json(R"({"train_batch_size": 16, "zero_optimisation": {"stage": 2}})"),
                 "zero_optimisation.stage (not a DeepSpeed key; did you mean zero_optimization.stage?)");
  expect_refused(
      check_json(
          R"({"train_batch_size": 16, "zero_optimization": {"stage": 3, "zero_quantized_weights": true}})"),
      "zero_optimization.zero_quantized_weights (true: ZeRO++'s quantized weights are not in troupe)");
  expect_refused(check_json(R"({"train_batch_size": 16, "gradient_allreduce_op": "sum"})"),
                 "gradient_allreduce_op (\"sum\": troupe averages gradients over the replicas");
  expect_refused(check_json(R"({"train_batch_size": 16, "amp": {"enabled": true, "opt_level": "O1"}})"),
                 "amp.enabled (true: NVIDIA Apex's AMP");
  auto autotp = check_json(R"({"train_batch_size": 16, "tensor_parallel": {"autotp_size": 2}})",
                           " --set parallel.dp=1 --toml");
  EXPECT_EQ(autotp.exit_code, 0) << autotp.output;
  EXPECT_NE(autotp.output.find("tp = 2"), std::string::npos) << autotp.output;
  auto off = check_json(R"({"train_batch_size": 16, "amp": {"enabled": false, "opt_level": "O1"},
                            "zero_optimization": {"stage": 1, "zero_quantized_weights": false, "mics_shard_size": -1}})");
  EXPECT_EQ(off.exit_code, 0) << off.output;
}

TEST(DeepSpeedConfig, SyntaxAndTypeErrorsNameTheLineColumnOrKeyPath) {
  expect_refused(check_json("{\n  \"train_batch_size\": 16,\n  \"zero_optimization\": {\"stage\": 2,}\n}\n"),
                 "ds_config.json:3:36: not valid JSON: syntax error while parsing object key");
  expect_refused(check_json(R"({"train_batch_size": 16, "zero_optimization": {"stage": "two"}})"),
                 "zero_optimization.stage must be an integer, got \"two\" (a string), for [zero] stage");
  expect_refused(
      check_json(R"({"train_batch_size": 16, "optimizer": {"type": "AdamW", "params": {"betas": 0.9}}})"),
      "optimizer.params.betas must be an array of two numbers, got 0.9");
  // A value of the right type out of range: troupe's own check, at the DeepSpeed key.
  expect_refused(check_json(R"({"train_batch_size": 16, "zero_optimization": {"stage": 7}})"),
                 "ds_config.json: zero_optimization.stage: [zero] stage must be one of 0, 1, 2 or 3, got 7");
  // fp16 with a negative loss scale or a hysteresis that is not a number: the scaler's key.
  expect_refused(check_json(R"({"train_batch_size": 16, "fp16": {"enabled": true, "loss_scale": -1}})"),
                 "ds_config.json: fp16.loss_scale: [precision] loss_scale = -1 is not a loss scale");
  expect_refused(check_json(R"({"train_batch_size": 16, "fp16": {"enabled": true, "hysteresis": "2"}})"),
                 "fp16.hysteresis must be an integer, got \"2\" (a string), for [precision] hysteresis");
  // fp16 with SGD on a GPU rank (LibTorch's optimizer, no fp32 masters), at the key that asked for it.
  expect_refused(check_json(R"({"train_batch_size": 16, "fp16": {"enabled": true},
                               "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})",
                            " --set cluster.device=\\\"cuda\\\""),
                 "[optimizer] type = \"sgd\" with [cluster] device = \"cuda\" and dtype = \"fp16\"");
}

// A job TOML may point at a DeepSpeed config for its training keys and give the model and
// the cluster itself; a key set in both is refused, naming both places.
TEST(DeepSpeedConfig, AJobTomlTakesItsTrainingKeysFromADeepSpeedConfig) {
  const std::string dir = testing::make_temp_dir();
  testing::write_file(dir + "/ds.json", testing::read_file(data("zero2_hf.json")));
  testing::write_file(dir + "/job.toml",
                      "deepspeed_config = \"ds.json\"\n[cluster]\nworld_size = 2\n[model]\nd_model = 32\n");
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " check " + dir + "/job.toml", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"stage = 2", "type = \"WarmupDecayLR\"", "d_model = 32", "world_size = 2",
                           "allgather_bucket_size is ignored"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << " in " << r.output;
  testing::write_file(dir + "/both.toml", "deepspeed_config = \"ds.json\"\n[zero]\nstage = 1\n");
  expect_refused(testing::run_command(std::string(TROUPE_BINARY) + " check " + dir + "/both.toml", 60),
                 "both.toml:3:9: [zero] stage is set here and by deepspeed_config (" + dir +
                     "/ds.json: zero_optimization.stage); set it in one place");
  testing::write_file(dir + "/missing.toml", "deepspeed_config = \"nowhere.json\"\n");
  expect_refused(testing::run_command(std::string(TROUPE_BINARY) + " check " + dir + "/missing.toml", 60),
                 "missing.toml:1:20: deepspeed_config: cannot read " + dir + "/nowhere.json");
}

// tensorboard and csv_monitor write where DeepSpeed's would (output_path/job_name, its
// defaults "" and "DeepSpeedJobName"); wandb, which needs W&B's servers, is refused saying so.
TEST(DeepSpeedConfig, MonitorSectionsWriteWhereDeepSpeedWouldAndWandbIsRefused) {
  auto mapped = check_json(R"({"train_batch_size": 16,
  "tensorboard": {"enabled": true, "output_path": "runs/", "job_name": "gpt-a"},
  "csv_monitor": {"enabled": true}})",
                           " --toml");
  ASSERT_EQ(mapped.exit_code, 0) << mapped.output;
  EXPECT_NE(mapped.output.find("tensorboard = \"runs/gpt-a\""), std::string::npos) << mapped.output;
  EXPECT_NE(mapped.output.find("csv = \"DeepSpeedJobName\""), std::string::npos) << mapped.output;
  auto off =
      check_json(R"({"train_batch_size": 16, "tensorboard": {"enabled": false}, "wandb": {"enabled": false,
  "project": "p"}})",
                 " --toml");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_NE(off.output.find("[monitor]\ntensorboard = \"\"\ncsv = \"\""), std::string::npos) << off.output;
  expect_refused(check_json(R"({"train_batch_size": 16, "wandb": {"enabled": "yes"}})"),
                 "wandb.enabled (true or false)");
  expect_refused(
      check_json(R"({"train_batch_size": 16, "wandb": {"enabled": true, "project": "p"}})"),
      "wandb.enabled (W&B's client sends the metrics to its servers, and troupe's ranks reach no network");
}

}  // namespace
}  // namespace troupe
