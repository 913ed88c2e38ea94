// A trainer of its own that embeds troupe: a small MLP learning a smooth function
// from a seeded stream of samples, trained data-parallel across the ranks that
// `troupe launch --ranks N -- embed_trainer JOB.toml` starts.
#include <troupe/troupe.hpp>

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int64_t features = 8;

// Sample i: inputs from a generator seeded by i alone, so every rank agrees.
troupe::MicroBatch samples(int64_t first, int64_t count) {
  std::vector<torch::Tensor> xs;
  for (int64_t i = first; i < first + count; ++i) {
    auto g = at::detail::createCPUGenerator(static_cast<uint64_t>(i) + 1);
    xs.push_back(torch::rand({features}, g) * 2 - 1);
  }
  torch::Tensor x = torch::stack(xs);
  // A fixed linear part plus a gentle curve: learnable in a few dozen steps.
  torch::Tensor w = torch::linspace(-1, 1, features).unsqueeze(1);
  torch::Tensor y = x.matmul(w) + 0.3 * torch::sin(3 * x.select(1, 0)).unsqueeze(1);
  return troupe::MicroBatch{x, y};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: embed_trainer JOB.toml [section.key=value ...]\n");
    return 2;
  }
  auto config = troupe::load_config_file(argv[1], std::vector<std::string>(argv + 2, argv + argc));
  if (!config) {
    std::fprintf(stderr, "embed_trainer: %s\n", config.error().message.c_str());
    return 2;
  }
  torch::manual_seed(static_cast<uint64_t>(config->train.seed));
  torch::nn::Sequential layers(torch::nn::Linear(features, 64), torch::nn::Tanh(), torch::nn::Linear(64, 64),
                               torch::nn::Tanh(), torch::nn::Linear(64, 1));
  troupe::Trainable trainable;
  trainable.layers = layers;
  trainable.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
  trainable.data = samples;
  auto engine = troupe::Engine::make(*config, std::move(trainable));
  if (!engine) {
    std::fprintf(stderr, "embed_trainer: %s\n", engine.error().message.c_str());
    return 1;
  }
  auto& e = **engine;
  double first = 0, last = 0;
  for (int64_t s = 0; s < config->train.steps; ++s) {
    auto r = e.train_batch();
    if (!r) {
      std::fprintf(stderr, "embed_trainer: %s\n", r.error().message.c_str());
      return 1;
    }
    if (s == 0) first = r->loss;
    last = r->loss;
    if (e.rank() == 0 && r->step % 10 == 0)
      std::printf("step %lld loss %.5f\n", static_cast<long long>(r->step), r->loss);
  }
  auto done = e.finish();
  if (!done) {
    std::fprintf(stderr, "embed_trainer: %s\n", done.error().message.c_str());
    return 1;
  }
  if (e.rank() == 0)
    std::printf("rank 0 of %lld: loss %.5f -> %.5f\n", static_cast<long long>(e.world_size()), first, last);
  return last < first ? 0 : 3;
}
