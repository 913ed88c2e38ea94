// An outside trainer, built against the installed API only, whose model shares one weight
// between two layers (layer 0's Linear weight is also layer 4's projection, transposed in
// use), registers one tensor twice in its head, and has two parameters no forward pass
// touches. `shared_weights_rank MODE PORT OUTDIR [section.key=value ...]`:
//   troupe     trains with troupe (started alone or by `troupe launch`); rank 0 prints
//              "loss STEP VALUE" per step and writes OUTDIR/initial.bin and
//              OUTDIR/parameters.bin (the parameters before and after, raw fp32, each
//              tensor once) and "tensor NAME OFFSET COUNT" for each; every rank checks
//              each step's token count and stops naming the step if it is off.
//   reference  trains the same model on the same global batches with a plain LibTorch
//              loop (AdamW over each tensor once, gradients set to none between steps),
//              printing and writing the same.
#include <troupe/troupe.hpp>

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "tests/support/sample_features.hpp"

namespace {

constexpr int64_t kFeatures = 8;
constexpr int64_t kWidth = 32;
constexpr int64_t kOutputs = 4;  // target elements ("tokens") per sample

// y = x·W + b with W = another layer's [kWidth, kFeatures] weight: [B, kWidth] -> [B, kFeatures].
struct TiedProjectionImpl : torch::nn::Module {
  explicit TiedProjectionImpl(const torch::Tensor& shared) {
    weight = register_parameter("weight", shared);
    bias = register_parameter("bias", torch::zeros({kFeatures}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::matmul(x, weight) + bias; }
  torch::Tensor weight, bias;
};
TORCH_MODULE(TiedProjection);

// A Linear head that registers its weight a second time, and two parameters it never uses:
// one large enough for a gathered row of its own in stage 3, one small (persistent).
struct HeadImpl : torch::nn::Module {
  HeadImpl() {
    projection = register_module("projection", torch::nn::Linear(kFeatures, kOutputs));
    alias = register_parameter("alias", projection->weight);
    spare = register_parameter("spare", torch::randn({20, 15}));
    spare_small = register_parameter("spare_small", torch::randn({5}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return projection(x); }
  torch::nn::Linear projection{nullptr};
  torch::Tensor alias, spare, spare_small;
};
TORCH_MODULE(Head);

torch::nn::Sequential make_model() {
  torch::manual_seed(7);
  torch::nn::Linear first(kFeatures, kWidth);
  return torch::nn::Sequential(first, torch::nn::Tanh(), torch::nn::Linear(kWidth, kWidth), torch::nn::Tanh(),
                               TiedProjection(first->weight), torch::nn::Tanh(), Head());
}

troupe::MicroBatch samples(int64_t first, int64_t count) {
  torch::Tensor x = troupe::testing::sample_features(first, count, kFeatures);
  torch::Tensor scale = torch::arange(1, kOutputs + 1, torch::kFloat32);
  return troupe::MicroBatch{x, torch::sin(x.sum(1, true) * scale)};
}

torch::Tensor mse(const torch::Tensor& out, const torch::Tensor& y) {
  return torch::mse_loss(out, y);
}

// Each tensor once, in the order the layers first use them (troupe's order too).
struct Tensors {
  std::vector<torch::Tensor> tensors;
  std::vector<std::string> names;
  // Taken before the engine starts: ZeRO stage 3 swaps a partitioned tensor's data for an
  // empty one while the stage actor builds, concurrently with this thread.
  std::vector<int64_t> counts;
};
Tensors unique_tensors(const torch::nn::Sequential& model) {
  Tensors t;
  std::unordered_set<const void*> seen;
  for (const auto& p : model->named_parameters())
    if (seen.insert(p.value().unsafeGetTensorImpl()).second) {
      t.tensors.push_back(p.value());
      t.names.push_back(p.key());
      t.counts.push_back(p.value().numel());
    }
  return t;
}

torch::Tensor flatten(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().reshape({-1}).clone());
  return torch::cat(flat);
}

void write(const std::string& path, const torch::Tensor& flat) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(flat.data_ptr()), static_cast<std::streamsize>(flat.nbytes()));
}

void describe(const Tensors& t, const std::string& dir, const torch::Tensor& initial) {
  int64_t offset = 0;
  for (std::size_t i = 0; i < t.tensors.size(); ++i) {
    std::printf("tensor %s %lld %lld\n", t.names[i].c_str(), static_cast<long long>(offset),
                static_cast<long long>(t.counts[i]));
    offset += t.counts[i];
  }
  write(dir + "/initial.bin", initial);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "shared_weights_rank: %s\n", message.c_str());
  return 1;
}

int reference(const troupe::JobConfig& config, const std::string& dir) {
  torch::set_num_threads(1);
  torch::nn::Sequential model = make_model();
  Tensors t = unique_tensors(model);
  describe(t, dir, flatten(t.tensors));
  const auto& o = config.optimizer;
  torch::optim::AdamW adamw(
      t.tensors,
      torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  const int64_t global = config.batch.global_batch_size;
  for (int64_t step = 0; step < config.train.steps; ++step) {
    troupe::MicroBatch batch = samples(step * global, global);
    torch::Tensor loss = mse(model->forward(batch.input), batch.target);
    loss.backward();
    adamw.step();
    for (auto& p : t.tensors) p.mutable_grad().reset();
    std::printf("loss %lld %.9g\n", static_cast<long long>(step + 1), loss.item<double>());
  }
  write(dir + "/parameters.bin", flatten(t.tensors));
  return 0;
}

int train(const troupe::JobConfig& config, const std::string& dir) {
  torch::nn::Sequential model = make_model();
  Tensors t = unique_tensors(model);
  torch::Tensor initial = flatten(t.tensors);
  troupe::Trainable trainable{model, mse, samples, nullptr, nullptr, nullptr};
  auto engine = troupe::Engine::make(config, std::move(trainable));
  if (!engine) return fail(engine.error().message);
  auto& e = **engine;
  if (e.rank() == 0) describe(t, dir, initial);
  const auto& b = config.batch;
  const int64_t tokens = b.micro_batch_size * b.gradient_accumulation_steps * config.parallel.dp * kOutputs;
  for (int64_t s = 0; s < config.train.steps; ++s) {
    auto r = e.train_batch();
    if (!r) return fail(r.error().message);
    if (r->tokens != tokens)
      return fail("rank " + std::to_string(e.rank()) + ", step " + std::to_string(r->step) + ": " +
                  std::to_string(r->tokens) + " tokens, expected " + std::to_string(tokens));
    if (e.rank() == 0) std::printf("loss %lld %.9g\n", static_cast<long long>(r->step), r->loss);
  }
  auto parameters = e.gather_parameters();
  if (!parameters) return fail(parameters.error().message);
  auto done = e.finish();
  if (!done) return fail(done.error().message);
  if (e.rank() == 0) write(dir + "/parameters.bin", *parameters);
  std::printf("rank %lld: every step's tokens were %lld\n", static_cast<long long>(e.rank()),
              static_cast<long long>(tokens));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: shared_weights_rank troupe|reference PORT OUTDIR [section.key=value ...]\n");
    return 2;
  }
  std::string mode = argv[1], dir = argv[3];
  std::vector<std::string> overrides = {"cluster.coordinator=127.0.0.1:" + std::string(argv[2]),
                                        "cluster.collective_timeout_s=30",
                                        "optimizer.lr=1e-2",
                                        "optimizer.weight_decay=0.1",
                                        "train.steps=25",
                                        "train.threads=1"};
  overrides.insert(overrides.end(), argv + 4, argv + argc);
  auto config = troupe::load_config_string("", "shared_weights_rank", overrides);
  if (!config) return fail(config.error().message);
  if (mode == "reference") return reference(*config, dir);
  if (mode == "troupe") return train(*config, dir);
  return fail("MODE must be troupe or reference, got " + mode);
}
