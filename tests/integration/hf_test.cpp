// Hugging Face checkpoints against transformers itself (tests/python/hf_models.py, with the
// Python whose torch is the LibTorch troupe builds against), for LlamaForCausalLM and
// GPT2LMHeadModel: a model with random weights, saved by save_pretrained, loads into
// troupe's model of that family with the same logits (1e-5) and the same loss on the same
// tokens; trained 20 steps by `troupe run` from that folder at tp 2 × dp 2, exported by
// `troupe export --format hf`, it loads in from_pretrained with logits equal to troupe's
// own for the trained parameters. Skips, saying so, where that Python lacks transformers.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/model_parameters.hpp"
#include "runtime/model/family.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/hf_checkpoint.hpp"
#include "runtime/model/safetensors.hpp"
#include "runtime/parameter_file.hpp"
#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

const std::string kPython = TROUPE_TORCH_PYTHON;
const std::string kScript = std::string(TROUPE_SOURCE_DIR) + "/tests/python/hf_models.py";

bool python_has_transformers() {
  return !kPython.empty() &&
         testing::run_command(kPython + " -c \"import transformers, safetensors\"", 120).exit_code == 0;
}

#define SKIP_WITHOUT_TRANSFORMERS()                                                                        \
  if (!python_has_transformers())                                                                          \
  GTEST_SKIP() << "no Python with torch, transformers and safetensors (TROUPE_TORCH_PYTHON = '" << kPython \
               << "'; scripts/torch-env.sh install adds them)"

// A folder hf_models.py made with save_pretrained, and its expected.safetensors.
std::string made_folder(const std::string& family) {
  const std::string dir = testing::make_temp_dir() + "/" + family;
  auto made = testing::run_command(
      "HF_HUB_OFFLINE=1 " + kPython + " " + kScript + " make " + family + " " + dir, 300);
  EXPECT_EQ(made.exit_code, 0) << made.output;
  return dir;
}

torch::Tensor tensor_of(const std::string& path, const std::string& name) {
  auto file = read_safetensors_header(path);
  EXPECT_TRUE(file.ok()) << file.error().message;
  auto t = read_safetensors_tensor(*file, name);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return *t;
}

// troupe's LLaMA of the folder's config.json (sequence 64), its weights from `load`.
template <typename Load>
torch::nn::Sequential troupe_model(const std::string& dir, Load load) {
  auto config = read_hf_config(dir);
  EXPECT_TRUE(config.ok()) << config.error().message;
  config->seq_len = 64;
  torch::manual_seed(1);  // any draw: every tensor is overwritten
  auto model = make_model(*config);
  auto parameters = model_parameters(model);
  EXPECT_TRUE(parameters.ok());
  Status loaded = load(*config, *parameters);
  EXPECT_TRUE(loaded.ok()) << loaded.error().message;
  return model;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

// The family's folder (hf_models.py's name) and the job of configs/ that takes it.
struct Family {
  std::string name;
  std::string job;  ///< `troupe run`'s config and the sets that give the folder's shape
};

class HuggingFace : public ::testing::TestWithParam<Family> {};

TEST_P(HuggingFace, AFolderOfItsGivesTheSameLogitsAndLoss) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string dir = made_folder(GetParam().name);
  auto model =
      troupe_model(dir, [&](const ModelConfig& c, ModelParameters& p) { return load_hf_folder(dir, c, p); });
  const std::string expected = dir + "/expected.safetensors";
  const torch::Tensor tokens = tensor_of(expected, "tokens");
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(tokens);
  const double logit_difference = max_difference(logits, tensor_of(expected, "logits"));
  EXPECT_LT(logit_difference, 1e-5);
  using torch::indexing::Slice;  // Hugging Face's labels = tokens: position t predicts t + 1
  const double loss =
      lm_loss(logits.index({Slice(), Slice(0, -1)}), tokens.index({Slice(), Slice(1)})).item<double>();
  const double hf_loss = tensor_of(expected, "loss").item<double>();
  EXPECT_NEAR(loss, hf_loss, 1e-5 * hf_loss);
  std::printf("hugging face: %s: transformers' logits within %.1e, loss %.7f against its %.7f\n",
              GetParam().name.c_str(), logit_difference, loss, hf_loss);
}

TEST_P(HuggingFace, ATrainedRunExportsAFolderFromPretrainedLoadsWithTroupesLogits) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string dir = made_folder(GetParam().name);
  const std::string root = testing::make_temp_dir();
  // The folder's shape, tp 2 × dp 2 under ZeRO 2, 20 steps, saved at the end: the export
  // puts each tensor back together from the ranks' slices.
  const std::string job =
      std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/" + GetParam().job +
      " --set model.init_from=\\\"" + dir + "\\\" --set model.norm_eps=1e-5" +
      " --set train.steps=20 --set zero.stage=2 --set batch.micro_batch_size=4 --set cluster.world_size=4" +
      " --set parallel.tp=2 --set checkpoint.dir=\\\"" + root +
      "/ckpt\\\" --set checkpoint.every_steps=20 --set cluster.coordinator=" + testing::free_coordinator();
  auto trained = testing::run_command(job, 300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  for (const std::string format : {"hf", "torch"}) {
    auto exported = testing::run_command(std::string(TROUPE_BINARY) + " export " + root + "/ckpt --format " +
                                             format + " --out " + root + "/export-" + format,
                                         120);
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
  }
  const std::string tokens_file = dir + "/expected.safetensors";
  auto theirs = testing::run_command("HF_HUB_OFFLINE=1 " + kPython + " " + kScript + " logits " + root +
                                         "/export-hf " + tokens_file + " " + root + "/theirs.safetensors",
                                     300);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.output;
  const std::string native = root + "/export-torch";
  auto model = troupe_model(
      dir, [&](const ModelConfig&, ModelParameters& p) { return load_parameter_file(native, p); });
  torch::NoGradGuard no_grad;
  const torch::Tensor ours = model->forward(tensor_of(tokens_file, "tokens"));
  EXPECT_GT(max_difference(ours, tensor_of(tokens_file, "logits")), 1e-3) << "20 steps must change the model";
  const double difference = max_difference(ours, tensor_of(root + "/theirs.safetensors", "logits"));
  EXPECT_LT(difference, 1e-5);
  std::printf(
      "hugging face: %s: after 20 steps, from_pretrained of troupe's export gives troupe's logits within "
      "%.1e\n",
      GetParam().name.c_str(), difference);
}

std::vector<double> losses_of(const std::string& metrics) {
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) losses.push_back(nlohmann::json::parse(line).at("loss"));
  return losses;
}

// Tensor parallelism from the folder: each rank's shards are cut from the loaded model, so
// tp 2 trains as the reference does from the same folder.
TEST_P(HuggingFace, TensorParallelRanksStartFromTheFolder) {
  SKIP_WITHOUT_TRANSFORMERS();
  const std::string dir = made_folder(GetParam().name);
  const std::string root = testing::make_temp_dir();
  const std::string job = std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR + "/configs/" +
                          GetParam().job + " --set model.init_from=\\\"" + dir +
                          "\\\" --set model.norm_eps=1e-5 --set train.steps=10" +
                          " --set optimizer.lr=1e-3 --set batch.micro_batch_size=8 --set parallel.dp=1";
  auto split = testing::run_command(
      job + " --set cluster.world_size=2 --set parallel.tp=2 --set cluster.coordinator=" +
          testing::free_coordinator() + " --metrics " + root + "/tp.jsonl",
      300);
  ASSERT_EQ(split.exit_code, 0) << split.output;
  auto whole = testing::run_command(
      job + " --reference --set cluster.world_size=1 --metrics " + root + "/ref.jsonl", 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::vector<double> tp = losses_of(root + "/tp.jsonl"), ref = losses_of(root + "/ref.jsonl");
  ASSERT_EQ(tp.size(), 10u);
  ASSERT_EQ(ref.size(), 10u);
  double worst = 0;
  for (std::size_t s = 0; s < 10; ++s) {
    EXPECT_NEAR(tp[s], ref[s], 1e-5 * ref[s]) << "step " << s + 1;
    worst = std::max(worst, std::abs(tp[s] - ref[s]) / ref[s]);
  }
  std::printf("hugging face: %s: tp 2 from the folder, 10 steps, worst loss %.1e relative\n",
              GetParam().name.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(
    Families, HuggingFace,
    ::testing::Values(Family{"llama", "tiny-llama.toml --set model.d_ff=96"},
                      Family{"gpt2",
                             "tiny-gpt.toml --set model.vocab_size=320 --set model.tie_embeddings=true"
                             " --set model.activation=\\\"gelu_tanh\\\""}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace troupe
