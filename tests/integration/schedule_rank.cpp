// A trainer whose layer sequence changes from step to step (layer drop), to check
// ZeRO stage 3 against it: `schedule_rank STAGE MODE PORT [key=value ...]`, started
// alone or by `troupe launch`. MODE: "all" runs every layer; "skip" drops layers 2-3
// (a Linear and its Tanh) at step 3 on every rank; "diverge" drops them on rank 1
// only, which stage 3 must refuse; "slow" runs every layer, rank 1's last one sleeping
// kSlowMs in each forward (a slower replica). Rank 0 prints "loss STEP VALUE" and
// "bubble STEP VALUE" per step and "parameters NORM" at the end.
#include <troupe/troupe.hpp>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/sample_features.hpp"

namespace {

constexpr int64_t kFeatures = 8;
constexpr int64_t kWidth = 16;
constexpr int64_t kSlowMs = 100;

// The identity, after sleeping `ms` milliseconds: compute time that only one rank spends.
struct SleepImpl : torch::nn::Module {
  explicit SleepImpl(int64_t ms) : ms(ms) {}
  torch::Tensor forward(const torch::Tensor& x) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return x;
  }
  int64_t ms;
};
TORCH_MODULE(Sleep);

troupe::MicroBatch samples(int64_t first, int64_t count) {
  torch::Tensor x = troupe::testing::sample_features(first, count, kFeatures);
  torch::Tensor y = torch::sin(2 * x.sum(1, true));
  return troupe::MicroBatch{x, y};
}

troupe::LayerSchedule schedule(const std::string& mode, int64_t rank, int64_t layers) {
  return [=](int64_t step, int64_t) {
    std::vector<int64_t> order;
    bool drop = step == 2 && (mode == "skip" || (mode == "diverge" && rank == 1));
    for (int64_t i = 0; i < layers; ++i)
      if (!(drop && (i == 2 || i == 3))) order.push_back(i);
    return order;
  };
}

int fail(const std::string& message) {
  std::fprintf(stderr, "schedule_rank: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: schedule_rank STAGE all|skip|diverge|slow PORT [section.key=value ...]\n");
    return 2;
  }
  std::string mode = argv[2];
  auto rank = troupe::detect_rank_environment(troupe::process_environment());
  if (!rank) return fail(rank.error().message);
  int64_t world = *rank ? (*rank)->world_size : 1;
  std::vector<std::string> overrides = {"cluster.world_size=" + std::to_string(world),
                                        "parallel.dp=" + std::to_string(world),
                                        "batch.global_batch_size=8",
                                        "batch.micro_batch_size=" + std::to_string(8 / world),
                                        "zero.stage=" + std::string(argv[1]),
                                        "zero.param_persistence_threshold=0",
                                        "zero.prefetch_bucket_size=300",
                                        "cluster.coordinator=127.0.0.1:" + std::string(argv[3]),
                                        "cluster.collective_timeout_s=20",
                                        "optimizer.lr=1e-2",
                                        "train.steps=6"};
  overrides.insert(overrides.end(), argv + 4, argv + argc);
  auto config = troupe::load_config_string("", "schedule_rank", overrides);
  if (!config) return fail(config.error().message);
  torch::manual_seed(7);
  torch::nn::Sequential layers(
      torch::nn::Linear(kFeatures, kWidth), torch::nn::Tanh(), torch::nn::Linear(kWidth, kWidth),
      torch::nn::Tanh(), torch::nn::Linear(kWidth, kWidth), torch::nn::Tanh(), torch::nn::Linear(kWidth, 1));
  int64_t own_rank = *rank ? (*rank)->rank : 0;
  if (mode == "slow") layers->push_back(Sleep(own_rank == 1 ? kSlowMs : 0));
  troupe::Trainable trainable{
      layers,
      [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); },
      samples,
      nullptr,
      schedule(mode, own_rank, static_cast<int64_t>(layers->size())),
      nullptr};
  auto engine = troupe::Engine::make(*config, std::move(trainable));
  if (!engine) return fail(engine.error().message);
  auto& e = **engine;
  for (int64_t s = 0; s < config->train.steps; ++s) {
    auto r = e.train_batch();
    if (!r) return fail(r.error().message);
    if (e.rank() == 0) {
      std::printf("loss %lld %.9g\n", static_cast<long long>(r->step), r->loss);
      std::printf("bubble %lld %.6f\n", static_cast<long long>(r->step), r->stats.bubble);
    }
  }
  auto parameters = e.gather_parameters();
  if (!parameters) return fail(parameters.error().message);
  auto done = e.finish();
  if (!done) return fail(done.error().message);
  if (e.rank() == 0) std::printf("parameters %.9g\n", parameters->norm().item<double>());
  return 0;
}
