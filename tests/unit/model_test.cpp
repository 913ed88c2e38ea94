// Specifications of the built-in GPT, the byte-level data, the reference trainer and the
// metrics output. CPU only, single process.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "actors/model_parameters.hpp"
#include "runtime/data/corpus.hpp"
#include "runtime/metrics.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/linear.hpp"
#include "runtime/model/model_shape.hpp"
#include "runtime/model/optimizer.hpp"
#include "runtime/reference.hpp"

namespace troupe {
namespace {

ModelConfig tiny_model() {
  ModelConfig model;
  model.seq_len = 32;
  model.d_model = 32;
  model.n_layers = 1;
  model.n_heads = 4;
  return model;
}

JobConfig tiny_job(int64_t micro_batch_size, int64_t steps) {
  JobConfig job;
  job.model = tiny_model();
  job.batch.global_batch_size = 8;
  job.batch.micro_batch_size = micro_batch_size;
  job.data.synthetic_bytes = 1 << 16;
  job.train.steps = steps;
  job.train.threads = 1;
  return job;
}

TextCorpus synthetic_corpus(int64_t bytes = 1 << 16) {
  DataConfig data;
  data.synthetic_bytes = bytes;
  auto corpus = TextCorpus::make(data, 7, 32);
  EXPECT_TRUE(corpus.ok());
  return *corpus;
}

torch::Tensor random_tokens(int64_t batch, int64_t length) {
  return torch::randint(0, 256, {batch, length}, torch::kLong);
}

TEST(Gpt, LayersAreEmbeddingBlocksThenHead) {
  ModelConfig model = tiny_model();
  model.n_layers = 3;
  torch::manual_seed(1);
  auto gpt = make_gpt(model);
  ASSERT_EQ(gpt->size(), 5u);
  auto x = gpt[0]->as<GptEmbedding>()->forward(random_tokens(2, 10));
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{2, 10, 32}));
  EXPECT_EQ(x.scalar_type(), torch::kFloat);
  for (size_t i = 1; i <= 3; ++i) {
    x = gpt[i]->as<GptBlock>()->forward(x);
    EXPECT_EQ(x.sizes(), (std::vector<int64_t>{2, 10, 32}));
  }
  auto logits = gpt[4]->as<GptHead>()->forward(x);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10, 256}));
}

TEST(Gpt, RunningLayerByLayerEqualsSequentialForward) {
  torch::manual_seed(2);
  auto gpt = make_gpt(tiny_model());
  auto tokens = random_tokens(3, 32);
  torch::Tensor x = tokens;
  for (auto& layer : *gpt) x = layer.forward(x);
  EXPECT_TRUE(torch::equal(x, gpt->forward(tokens)));
}

TEST(Gpt, SameSeedGivesIdenticalWeights) {
  torch::manual_seed(42);
  auto first = flatten_parameters(*make_gpt(tiny_model()));
  torch::manual_seed(42);
  auto second = flatten_parameters(*make_gpt(tiny_model()));
  torch::manual_seed(43);
  auto other = flatten_parameters(*make_gpt(tiny_model()));
  EXPECT_TRUE(torch::equal(first, second));
  EXPECT_FALSE(torch::equal(first, other));
}

TEST(Gpt, FlattenedParametersCoverEveryParameter) {
  auto gpt = make_gpt(tiny_model());
  // embedding 256×32 + 32×32; block 2×(32+32) LN + 32×96+96 + 32×32+32 + 32×128+128 +
  // 128×32+32; head 32+32 LN + 32×256.
  const int64_t expected = 256 * 32 + 32 * 32 + 4 * 32 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 128 + 128) +
                           (128 * 32 + 32) + 2 * 32 + 32 * 256;
  EXPECT_EQ(count_parameters(*gpt), expected);
  EXPECT_EQ(flatten_parameters(*gpt).numel(), expected);
}

TEST(Gpt, TiedEmbeddingsMakeTheHeadUseTheTokenEmbeddingItself) {
  ModelConfig model = tiny_model();
  model.tie_embeddings = true;
  torch::manual_seed(3);
  auto gpt = make_gpt(model);
  const int64_t untied = count_parameters(*make_gpt(tiny_model()));
  EXPECT_EQ(count_parameters(*gpt), untied - 256 * 32);
  auto parameters = model_parameters(gpt);
  ASSERT_TRUE(parameters.ok()) << parameters.error().message;
  EXPECT_EQ(parameters->borrowed.back(), (std::vector<std::size_t>{0}));
  EXPECT_EQ(parameters->names.front(), "embedding.token.weight");
  // Both uses add into the one gradient: the head's logits and the embedding's lookup.
  auto tokens = random_tokens(2, 8);
  lm_loss(gpt->forward(tokens), random_tokens(2, 8)).backward();
  const torch::Tensor& weight = gpt[0]->as<GptEmbedding>()->token_weight();
  auto rows_not_looked_up = torch::ones({256}, torch::kBool);
  rows_not_looked_up.index_put_({tokens.reshape({-1})}, false);
  EXPECT_GT(weight.grad().index({rows_not_looked_up}).abs().sum().item<double>(), 0)
      << "rows no token looked up get their gradient from the head alone";
}

TEST(Gpt, ShapeAloneGivesEveryLayersParametersAsMakeGptRegistersThem) {
  for (bool tied : {false, true}) {
    ModelConfig model = tiny_model();
    model.n_layers = 2;
    model.d_ff = 48;
    model.vocab_size = 300;
    model.tie_embeddings = tied;
    auto parameters = model_parameters(make_gpt(model));
    ASSERT_TRUE(parameters.ok());
    ModelShape shape = model_shape(model);
    EXPECT_EQ(shape.layers, parameters->owned_counts()) << "tied " << tied;
    EXPECT_EQ(shape.borrowed, parameters->borrowed) << "tied " << tied;
    EXPECT_EQ(shape.parameters, parameters->elements()) << "tied " << tied;
  }
}

TEST(Gpt, ChangingAFutureTokenLeavesEarlierLogitsUnchanged) {
  torch::manual_seed(3);
  auto gpt = make_gpt(tiny_model());
  auto tokens = random_tokens(2, 32);
  auto changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), 20}, (tokens.select(1, 20) + 1) % 256);
  torch::NoGradGuard no_grad;
  auto before = gpt->forward(tokens);
  auto after = gpt->forward(changed);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(before.index({Slice(), Slice(0, 20)}), after.index({Slice(), Slice(0, 20)})));
  EXPECT_FALSE(torch::allclose(before.index({Slice(), Slice(20)}), after.index({Slice(), Slice(20)})));
}

TEST(Gpt, InitialLossIsNearUniformOverBytes) {
  torch::manual_seed(4);
  auto gpt = make_gpt(tiny_model());
  auto corpus = synthetic_corpus();
  auto batch = sample_sequences(corpus, 32, 4, 0, 8);
  const double loss = lm_loss(gpt->forward(batch.input), batch.target).item<double>();
  EXPECT_NEAR(loss, std::log(256.0), 0.3);
}

// What the mixed-precision work builds on (docs/DESIGN.md, "Mixed precision"): LibTorch
// 2's CPU kernels run the whole GPT, forward and backward, in bf16 and in fp16 (LibTorch
// 1.13 had no fp16 CPU kernel for addmm, bmm, layer_norm, gelu, softmax, tanh or exp), with
// a loss near fp32's and gradients in the compute dtype.
TEST(Gpt, CpuKernelsRunTheGptInBf16AndFp16) {
  torch::manual_seed(4);
  auto gpt = make_gpt(tiny_model());
  auto batch = sample_sequences(synthetic_corpus(), 32, 4, 0, 8);
  const double fp32 = lm_loss(gpt->forward(batch.input), batch.target).item<double>();
  for (auto [type, tolerance] : {std::pair{torch::kBFloat16, 0.02}, std::pair{torch::kHalf, 0.005}}) {
    SCOPED_TRACE(c10::toString(type));
    torch::manual_seed(4);
    auto low = make_gpt(tiny_model());  // the same initial weights, rounded once
    low->to(type);
    torch::Tensor loss = lm_loss(low->forward(batch.input).to(torch::kFloat), batch.target);
    loss.backward();
    EXPECT_NEAR(loss.item<double>(), fp32, tolerance * fp32) << "bf16 keeps 8 bits of mantissa, fp16 11";
    for (const auto& p : low->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().scalar_type(), type);
    }
  }
}

// Forward output and the gradients of x, W and b (b may be undefined) under a fixed
// upstream gradient, through `apply`.
template <typename Apply>
std::vector<torch::Tensor> linear_outputs_and_gradients(Apply apply, const torch::Tensor& x,
                                                        const torch::Tensor& weight,
                                                        const torch::Tensor& bias,
                                                        const torch::Tensor& upstream) {
  auto x_leaf = x.clone().requires_grad_(true);
  auto weight_leaf = weight.clone().requires_grad_(true);
  torch::Tensor bias_leaf = bias.defined() ? bias.clone().requires_grad_(true) : torch::Tensor();
  auto y = apply(x_leaf, weight_leaf, bias_leaf);
  (y * upstream).sum().backward();
  return {y.detach(), x_leaf.grad(), weight_leaf.grad(),
          bias_leaf.defined() ? bias_leaf.grad() : torch::Tensor()};
}

TEST(Linear, MatchesFunctionalLinearWithAndWithoutBias) {
  torch::manual_seed(11);
  auto x = torch::randn({2, 3, 5});
  auto weight = torch::randn({4, 5});
  auto bias = torch::randn({4});
  auto upstream = torch::randn({2, 3, 4});
  auto reference = [](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    return torch::nn::functional::linear(x, w, b);
  };
  for (const torch::Tensor& b : {bias, torch::Tensor()}) {
    SCOPED_TRACE(b.defined() ? "with bias" : "without bias");
    auto ours = linear_outputs_and_gradients(linear, x, weight, b, upstream);
    auto theirs = linear_outputs_and_gradients(reference, x, weight, b, upstream);
    EXPECT_EQ(ours[0].sizes(), (std::vector<int64_t>{2, 3, 4}));
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(ours[i].defined()) << "output " << i;
      EXPECT_EQ(ours[i].sizes(), theirs[i].sizes()) << "output " << i;
      EXPECT_TRUE(torch::allclose(ours[i], theirs[i], 0, 1e-6)) << "output " << i;
    }
    ASSERT_EQ(ours[3].defined(), b.defined());
    if (b.defined()) {
      EXPECT_TRUE(torch::allclose(ours[3], theirs[3], 0, 1e-6));
    }
  }
}

TEST(Linear, WeightDataMayBeSwappedOutBetweenForwardAndBackward) {
  torch::manual_seed(12);
  auto x = torch::randn({2, 3, 5});
  auto original = torch::randn({4, 5});
  auto upstream = torch::randn({2, 3, 4});
  auto expected = upstream.reshape({-1, 4}).t().mm(x.reshape({-1, 5}));

  auto weight = original.clone().requires_grad_(true);
  auto y = linear(x, weight, torch::Tensor());
  // What ZeRO stage 3 does: release the parameter's data after forward, gather it back in
  // (a fresh tensor) before backward.
  weight.set_data(torch::empty({0}));
  weight.set_data(original.clone());
  (y * upstream).sum().backward();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_TRUE(torch::allclose(weight.grad(), expected, 0, 1e-6));
}

TEST(Linear, BackwardReadsTheDataTheWeightHoldsThen) {
  // A saved view of the weight would still hold the forward-time data; linear() saves the
  // parameter itself, so x's gradient uses whatever was swapped in before backward.
  torch::manual_seed(13);
  auto x = torch::randn({2, 3, 5}).requires_grad_(true);
  auto original = torch::randn({4, 5});
  auto upstream = torch::randn({2, 3, 4});
  auto weight = original.clone().requires_grad_(true);
  auto y = linear(x, weight, torch::Tensor());
  weight.set_data(torch::empty({0}));
  weight.set_data(original * 2);
  (y * upstream).sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), upstream.matmul(original * 2), 0, 1e-5));
}

TEST(Optimizer, ConfigTypeSelectsTheLibTorchOptimizer) {
  auto parameters = make_gpt(tiny_model())->parameters();
  OptimizerConfig config;
  config.type = OptimizerType::adamw;
  EXPECT_NE(dynamic_cast<torch::optim::AdamW*>(make_optimizer(config, parameters).get()), nullptr);
  config.type = OptimizerType::adam;
  EXPECT_NE(dynamic_cast<torch::optim::Adam*>(make_optimizer(config, parameters).get()), nullptr);
  config.type = OptimizerType::sgd;
  config.momentum = 0.9;
  config.nesterov = true;
  auto sgd = make_optimizer(config, parameters);
  ASSERT_NE(dynamic_cast<torch::optim::SGD*>(sgd.get()), nullptr);
  const auto& options = static_cast<const torch::optim::SGDOptions&>(sgd->defaults());
  EXPECT_DOUBLE_EQ(options.momentum(), 0.9);
  EXPECT_TRUE(options.nesterov());
}

TEST(Corpus, SyntheticTextIsDeterministicPrintableText) {
  auto first = synthetic_corpus(4096);
  auto second = synthetic_corpus(4096);
  ASSERT_EQ(first.size(), 4096);
  EXPECT_EQ(std::string(first.data(), first.data() + first.size()),
            std::string(second.data(), second.data() + second.size()));
  for (int64_t i = 0; i < first.size(); ++i) {
    const uint8_t byte = first.data()[i];
    ASSERT_TRUE(byte == '\n' || (byte >= 32 && byte < 127)) << "byte " << i;
  }
}

TEST(Corpus, MissingFileIsAnErrorNamingThePath) {
  DataConfig data;
  data.path = "/nonexistent/troupe-corpus.txt";
  auto corpus = TextCorpus::make(data, 1, 32);
  ASSERT_FALSE(corpus.ok());
  EXPECT_NE(corpus.error().message.find(data.path), std::string::npos);
}

TEST(Corpus, DirectoryIsAnErrorNamingThePath) {
  DataConfig data;
  data.path = testing::TempDir();
  auto corpus = TextCorpus::make(data, 1, 32);
  ASSERT_FALSE(corpus.ok());
  EXPECT_NE(corpus.error().message.find(data.path), std::string::npos);
}

TEST(Corpus, FileTooShortForOneSampleIsAnErrorNamingThePath) {
  const std::string path = testing::TempDir() + "troupe-short-corpus.txt";
  std::ofstream(path) << "too short";
  DataConfig data;
  data.path = path;
  auto corpus = TextCorpus::make(data, 1, 32);
  ASSERT_FALSE(corpus.ok());
  EXPECT_NE(corpus.error().message.find(path), std::string::npos);
  EXPECT_TRUE(TextCorpus::make(data, 1, 7).ok());
  std::remove(path.c_str());
}

TEST(Corpus, SamplesDependOnlyOnTheirGlobalIndex) {
  auto corpus = synthetic_corpus();
  auto whole = sample_sequences(corpus, 32, 9, 0, 8);
  auto again = sample_sequences(corpus, 32, 9, 0, 8);
  auto front = sample_sequences(corpus, 32, 9, 0, 4);
  auto back = sample_sequences(corpus, 32, 9, 4, 4);
  EXPECT_TRUE(torch::equal(whole.input, again.input));
  EXPECT_TRUE(torch::equal(whole.input, torch::cat({front.input, back.input})));
  EXPECT_TRUE(torch::equal(whole.target, torch::cat({front.target, back.target})));
  EXPECT_FALSE(torch::equal(whole.input, sample_sequences(corpus, 32, 10, 0, 8).input));
}

TEST(Corpus, TargetIsInputShiftedByOneByte) {
  auto corpus = synthetic_corpus();
  auto batch = sample_sequences(corpus, 32, 5, 100, 6);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{6, 32}));
  EXPECT_EQ(batch.input.scalar_type(), torch::kLong);
  using torch::indexing::Slice;
  EXPECT_TRUE(
      torch::equal(batch.input.index({Slice(), Slice(1)}), batch.target.index({Slice(), Slice(0, 31)})));
}

TEST(Reference, LossFallsOverThirtySteps) {
  auto history = train_reference(tiny_job(8, 30), nullptr, nullptr);
  ASSERT_TRUE(history.ok()) << history.error().message;
  ASSERT_EQ(history->size(), 30u);
  EXPECT_EQ(history->back().step, 30);
  EXPECT_LT(history->back().loss, history->front().loss - 1.0);
}

TEST(Reference, MicroBatchSplitDoesNotChangeLosses) {
  torch::Tensor accumulated_parameters;
  torch::Tensor whole_parameters;
  auto accumulated = train_reference(tiny_job(2, 10), nullptr, &accumulated_parameters);
  auto whole = train_reference(tiny_job(8, 10), nullptr, &whole_parameters);
  ASSERT_TRUE(accumulated.ok() && whole.ok());
  for (size_t i = 0; i < whole->size(); ++i) {
    EXPECT_NEAR((*accumulated)[i].loss, (*whole)[i].loss, 1e-5 * std::abs((*whole)[i].loss))
        << "step " << i + 1;
  }
  EXPECT_TRUE(torch::allclose(accumulated_parameters, whole_parameters, 1e-4, 1e-5));
}

TEST(Reference, DefaultModelLearnsTheSyntheticCorpusWithinAHundredSteps) {
  JobConfig job;  // default model: d_model 64, 2 layers, seq_len 64
  job.batch.global_batch_size = 8;
  job.batch.micro_batch_size = 8;
  job.train.steps = 100;
  job.train.threads = 1;
  auto history = train_reference(job, nullptr, nullptr);
  ASSERT_TRUE(history.ok()) << history.error().message;
  EXPECT_GT(history->front().loss, 5.0);
  EXPECT_LT(history->back().loss, 3.0);
}

TEST(Reference, LibTorchErrorsComeBackAsErrors) {
  auto job = tiny_job(8, 1);
  job.optimizer.type = OptimizerType::sgd;
  job.optimizer.nesterov = true;  // LibTorch rejects nesterov without momentum
  auto history = train_reference(job, nullptr, nullptr);
  ASSERT_FALSE(history.ok());
  EXPECT_NE(history.error().message.find("reference training failed"), std::string::npos);
}

TEST(Reference, UnresolvedBatchIsAnError) {
  auto job = tiny_job(3, 1);
  auto history = train_reference(job, nullptr, nullptr);
  ASSERT_FALSE(history.ok());
  EXPECT_NE(history.error().message.find("micro_batch_size"), std::string::npos);
}

TEST(Reference, ReportsEveryStepToTheCallback) {
  std::vector<int64_t> steps;
  auto history = train_reference(
      tiny_job(8, 3), [&](const StepMetrics& m) { steps.push_back(m.step); }, nullptr);
  ASSERT_TRUE(history.ok());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ((*history)[0].tokens, 8 * 32);
  EXPECT_GT((*history)[0].tokens_per_s, 0);
}

TEST(Reference, ReportsGradientNormParametersAndModelStateBytes) {
  auto job = tiny_job(8, 2);
  auto history = train_reference(job, nullptr, nullptr);
  ASSERT_TRUE(history.ok()) << history.error().message;
  const int64_t params = count_parameters(*make_gpt(job.model));
  for (const auto& m : *history) {
    EXPECT_GT(m.grad_norm, 0);
    EXPECT_TRUE(std::isfinite(m.grad_norm));
    EXPECT_EQ(m.params, params);
    EXPECT_EQ(m.parameter_bytes, 4 * params);
    EXPECT_EQ(m.gradient_bytes, 4 * params);
    EXPECT_EQ(m.optimizer_state_bytes, 2 * 4 * params);  // AdamW: exp_avg and exp_avg_sq
    EXPECT_EQ(m.communication_bytes, 0);
    EXPECT_EQ(m.model_state_bytes, 4 * 4 * params);
  }

  job.optimizer.type = OptimizerType::sgd;
  job.optimizer.momentum = 0.9;
  auto sgd = train_reference(job, nullptr, nullptr);
  ASSERT_TRUE(sgd.ok()) << sgd.error().message;
  EXPECT_EQ(sgd->back().optimizer_state_bytes, 4 * params);  // the momentum buffers
  job.optimizer.momentum = 0;
  auto plain = train_reference(job, nullptr, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->back().optimizer_state_bytes, 0);
  EXPECT_EQ(plain->back().model_state_bytes, 2 * 4 * params);
}

TEST(Reference, GradientClippingChangesTheUpdateOnlyWhenTheNormExceedsIt) {
  // SGD without momentum or decay: the update is lr × gradient, so clipping to c scales the
  // first step's update by c / norm exactly.
  auto job = tiny_job(8, 1);
  job.optimizer.type = OptimizerType::sgd;
  job.optimizer.weight_decay = 0;
  job.optimizer.lr = 0.1;
  torch::manual_seed(static_cast<uint64_t>(job.train.seed));
  const torch::Tensor initial = flatten_parameters(*make_gpt(job.model));
  torch::Tensor unclipped_parameters;
  auto unclipped = train_reference(job, nullptr, &unclipped_parameters);
  ASSERT_TRUE(unclipped.ok()) << unclipped.error().message;
  const double norm = unclipped->front().grad_norm;
  ASSERT_GT(norm, 0);

  job.optimizer.gradient_clipping = norm / 4;
  torch::Tensor clipped_parameters;
  auto clipped = train_reference(job, nullptr, &clipped_parameters);
  ASSERT_TRUE(clipped.ok()) << clipped.error().message;
  EXPECT_DOUBLE_EQ(clipped->front().grad_norm, norm);  // reported before clipping
  const torch::Tensor unclipped_update = unclipped_parameters - initial;
  const torch::Tensor clipped_update = clipped_parameters - initial;
  const double scale = (norm / 4) / (norm + 1e-6);
  EXPECT_TRUE(torch::allclose(clipped_update, unclipped_update * scale, 1e-3, 1e-6));

  job.optimizer.gradient_clipping = norm * 4;  // above the norm: no clipping at all
  torch::Tensor loose_parameters;
  auto loose = train_reference(job, nullptr, &loose_parameters);
  ASSERT_TRUE(loose.ok()) << loose.error().message;
  EXPECT_TRUE(torch::equal(loose_parameters, unclipped_parameters));
}

TEST(Metrics, ProgressLineShowsStepLossRateAndEta) {
  StepMetrics metrics{12, 20, 3.21414, 1234.4, 10.0, 4096};
  EXPECT_EQ(format_progress(metrics, 10.5), "step 12/20  loss 3.2141  1,234 tok/s  ETA 0:07");
}

TEST(Metrics, SummaryNamesStepsLossRateWallAndTrace) {
  std::vector<StepMetrics> steps = {{1, 2, 4.0, 0, 500.0, 1000}, {2, 2, 3.5, 0, 500.0, 1000}};
  EXPECT_EQ(format_summary(steps, 1.31, "out/trace.json"),
            "trained 2 steps  final loss 3.5000  2,000 tok/s  wall 1.3 s  trace out/trace.json");
}

TEST(Metrics, GroupsThousandsAndFormatsDurations) {
  EXPECT_EQ(group_thousands(0), "0");
  EXPECT_EQ(group_thousands(999), "999");
  EXPECT_EQ(group_thousands(1234567), "1,234,567");
  EXPECT_EQ(group_thousands(-1000), "-1,000");
  EXPECT_EQ(format_duration(7.4), "0:07");
  EXPECT_EQ(format_duration(3725), "1:02:05");
}

TEST(Metrics, WriterAppendsOneJsonObjectPerStep) {
  const std::string path = testing::TempDir() + "troupe-metrics.jsonl";
  {
    auto writer = MetricsWriter::make(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->write({1, 2, 5.5, 100.0, 10.0, 1000}).ok());
    ASSERT_TRUE(writer
                    ->write({2,   2,  5.0,  200.0, 5.0,  1000, 0.75, 123,    4000,  492,   492,
                             984, 64, 2048, 4096,  0.25, 3e-4, 8192, 1024.0, false, 4.5e9, 0.375})
                    .ok());
    StepMetrics skipped{3, 3, 4.5, 100.0, 10.0, 1000};
    skipped.grad_norm = std::numeric_limits<double>::infinity();
    skipped.loss_scale = 512;
    skipped.skipped = true;
    ASSERT_TRUE(writer->write(skipped).ok());
  }
  std::ifstream file(path);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(file, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1]["step"], 2);
  EXPECT_DOUBLE_EQ(lines[1]["loss"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(lines[1]["tokens_per_s"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(lines[1]["step_ms"].get<double>(), 5.0);
  EXPECT_EQ(lines[1]["steps_total"], 2);
  EXPECT_EQ(lines[1]["tokens"], 1000);
  EXPECT_DOUBLE_EQ(lines[1]["grad_norm"].get<double>(), 0.75);
  EXPECT_EQ(lines[1]["params"], 123);
  EXPECT_EQ(lines[1]["model_state_bytes"], 4000);
  EXPECT_EQ(lines[1]["parameter_bytes"], 492);
  EXPECT_EQ(lines[1]["gradient_bytes"], 492);
  EXPECT_EQ(lines[1]["optimizer_state_bytes"], 984);
  EXPECT_EQ(lines[1]["communication_bytes"], 64);
  EXPECT_EQ(lines[1]["activation_bytes"], 2048);
  EXPECT_EQ(lines[1]["device_bytes"], 4096);
  EXPECT_DOUBLE_EQ(lines[1]["bubble"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(lines[1]["lr"].get<double>(), 3e-4);
  EXPECT_EQ(lines[1]["sent_bytes"], 8192);
  EXPECT_DOUBLE_EQ(lines[1]["loss_scale"].get<double>(), 1024.0);
  EXPECT_EQ(lines[1]["skipped"], false);
  EXPECT_DOUBLE_EQ(lines[1]["step_flops"].get<double>(), 4.5e9);
  EXPECT_DOUBLE_EQ(lines[1]["mfu"].get<double>(), 0.375);
  EXPECT_EQ(lines[1].size(), 22u);  // every StepMetrics field, nothing else
  // A step the loss scaler skipped: its norm is not a number JSON has, so it is null.
  EXPECT_TRUE(lines[2]["grad_norm"].is_null());
  EXPECT_EQ(lines[2]["skipped"], true);
  EXPECT_DOUBLE_EQ(lines[2]["loss_scale"].get<double>(), 512.0);
  // Fields a trainer leaves unset are written as zero.
  EXPECT_EQ(lines[0]["model_state_bytes"], 0);
  EXPECT_DOUBLE_EQ(lines[0]["grad_norm"].get<double>(), 0.0);
  std::remove(path.c_str());
}

TEST(Metrics, UnopenablePathIsAnErrorNamingIt) {
  auto writer = MetricsWriter::make("/nonexistent/dir/metrics.jsonl");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.error().message.find("/nonexistent/dir/metrics.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace troupe
