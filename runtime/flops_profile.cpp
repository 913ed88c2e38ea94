#include "runtime/flops_profile.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/deferred_weights.hpp"
#include "runtime/data/token_data.hpp"
#include "runtime/metrics.hpp"
#include "runtime/model/family.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/model_flops.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One pass: every layer forward on the previous one's detached output, then backward
// from the loss, layer by layer, each timed on its own. `split`: each layer's backward as
// a split schedule runs it, its input half (the weights' gradients deferred) and then its
// weight half, timed apart into backward_input and backward_weight.
LayerTimes one_pass(std::vector<torch::nn::AnyModule*>& modules, const MicroBatch& batch,
                    const LossFunction& loss, bool split) {
  const std::size_t count = modules.size();
  LayerTimes took{std::vector<double>(count), std::vector<double>(count), {}, {}, {}, {}};
  if (split) took.backward_input = took.backward_weight = std::vector<double>(count);
  std::vector<torch::Tensor> inputs, outputs;
  torch::Tensor x = batch.input;
  for (std::size_t i = 0; i < count; ++i) {
    torch::Tensor in = x.is_floating_point() ? x.detach().requires_grad_(true) : x;
    auto start = Clock::now();
    torch::Tensor out = modules[i]->forward(in);
    took.forward[i] = seconds_since(start);
    inputs.push_back(in);
    outputs.push_back(out);
    x = out;
  }
  torch::Tensor gradient;
  for (std::size_t k = count; k-- > 0;) {
    DeferredWeights deferred;
    auto start = Clock::now();
    {
      std::optional<DeferredWeights::Scope> scope;
      if (split) scope.emplace(deferred);
      if (k + 1 == count)
        loss(outputs[k], batch.target).backward();
      else
        outputs[k].backward(gradient);
    }
    took.backward[k] = seconds_since(start);
    if (split) {
      took.backward_input[k] = took.backward[k];
      start = Clock::now();
      deferred.run();
      took.backward_weight[k] = seconds_since(start);
      took.backward[k] += took.backward_weight[k];
    }
    if (inputs[k].requires_grad()) gradient = inputs[k].grad();
  }
  return took;
}

double rate(double flops, double seconds) {
  return seconds > 0 ? flops / seconds : 0;
}

}  // namespace

// An fp32 product of two square matrices of `n` ("bf16"/"fp16": in that dtype), the best
// of a few after one that warms up.
double gemm_peak_flops(int64_t n, const std::string& dtype) {
  const auto type = dtype == "bf16" ? torch::kBFloat16 : dtype == "fp16" ? torch::kFloat16 : torch::kFloat32;
  torch::Tensor a = torch::randn({n, n}).to(type), b = torch::randn({n, n}).to(type);
  torch::Tensor c = torch::mm(a, b);  // warm-up
  double best = 1e300;
  for (int r = 0; r < 5; ++r) {
    auto start = Clock::now();
    torch::mm_out(c, a, b);
    best = std::min(best, seconds_since(start));
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
}

LayerTimes time_layers(torch::nn::Sequential layers, const MicroBatch& batch, const LossFunction& loss,
                       int repeats, bool typical, bool split, double warmup_s) {
  std::vector<torch::nn::AnyModule*> modules;
  for (auto& module : *layers) modules.push_back(&module);
  const auto warm_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::max(0.0, warmup_s)));
  do {  // at least one untimed pass of each kind: the allocator and the kernels warm up
    one_pass(modules, batch, loss, false);
    if (split) one_pass(modules, batch, loss, true);
  } while (Clock::now() < warm_until);
  std::vector<LayerTimes> passes, split_passes;
  for (int r = 1; r <= repeats; ++r) {
    passes.push_back(one_pass(modules, batch, loss, false));
    if (split) split_passes.push_back(one_pass(modules, batch, loss, true));
  }
  auto pick = [&](const std::vector<LayerTimes>& from, std::vector<double> LayerTimes::*times,
                  std::size_t i) {
    std::vector<double> each;
    for (const LayerTimes& p : from) each.push_back((p.*times)[i]);
    std::sort(each.begin(), each.end());
    return typical ? each[each.size() / 2] : each.front();
  };
  const std::size_t count = modules.size();
  LayerTimes chosen{std::vector<double>(count), std::vector<double>(count), {}, {}, {}, {}};
  if (split) chosen.backward_input = chosen.backward_weight = std::vector<double>(count);
  for (std::size_t i = 0; i < count; ++i) {
    chosen.forward[i] = pick(passes, &LayerTimes::forward, i);
    chosen.backward[i] = pick(passes, &LayerTimes::backward, i);
    if (!split) continue;
    chosen.backward_input[i] = pick(split_passes, &LayerTimes::backward_input, i);
    chosen.backward_weight[i] = pick(split_passes, &LayerTimes::backward_weight, i);
  }
  for (const LayerTimes& p : passes) {
    chosen.pass_forward.push_back(std::accumulate(p.forward.begin(), p.forward.end(), 0.0));
    chosen.pass_backward.push_back(std::accumulate(p.backward.begin(), p.backward.end(), 0.0));
  }
  for (auto& p : layers->parameters()) p.mutable_grad() = torch::Tensor();
  return chosen;
}

double model_step_flops(const JobConfig& job) {
  double flops = 0;
  for (const LayerFlops& l : model_layer_flops(job.model, job.batch.micro_batch_size, job.model.seq_len))
    flops += l.forward + l.backward;
  return flops * static_cast<double>(job.batch.gradient_accumulation_steps * job.parallel.dp);
}

int run_flops_profile(const JobConfig& job, int repeats, bool json, bool typical, double warmup_s) {
  const int64_t micro = job.batch.micro_batch_size, seq = job.model.seq_len;
  auto data = TokenData::make(job);
  if (!data) {
    std::fprintf(stderr, "troupe: %s\n", data.error().message.c_str());
    return 1;
  }
  const int64_t threads =
      job.train.threads > 0 ? job.train.threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(static_cast<uint64_t>(job.train.seed));
  auto layers = make_model(job.model);
  TokenBatch b = data->train(0, micro);
  // The split halves only in JSON: what `troupe simulate` reads; the table has no column for them.
  LayerTimes times =
      time_layers(layers, MicroBatch{b.input, b.target}, lm_loss, repeats, typical, json, warmup_s);
  std::vector<LayerFlops> flops = model_layer_flops(job.model, micro, seq);
  const double peak = gemm_peak_flops(1024, "fp32");

  double forward = 0, backward = 0, forward_s = 0, backward_s = 0;
  for (std::size_t i = 0; i < flops.size(); ++i) {
    forward += flops[i].forward, backward += flops[i].backward;
    forward_s += times.forward[i], backward_s += times.backward[i];
  }
  const int64_t accumulation = job.batch.gradient_accumulation_steps;
  if (json) {
    nlohmann::json j{{"file", job.source},
                     {"micro_batch", micro},
                     {"seq", seq},
                     {"threads", threads},
                     {"repeats", repeats},
                     {"warmup_s", warmup_s},
                     {"typical", typical},
                     {"forward_flops", forward},
                     {"backward_flops", backward},
                     {"forward_ms", 1e3 * forward_s},
                     {"backward_ms", 1e3 * backward_s},
                     {"step_flops", (forward + backward) * static_cast<double>(accumulation)},
                     {"gemm_peak_flops", peak},
                     {"mfu", rate(forward + backward, forward_s + backward_s) / peak}};
    for (std::size_t i = 0; i < times.pass_forward.size(); ++i)
      j["passes"].push_back(
          {{"forward_ms", 1e3 * times.pass_forward[i]}, {"backward_ms", 1e3 * times.pass_backward[i]}});
    for (std::size_t i = 0; i < flops.size(); ++i)
      j["layers"].push_back({{"name", flops[i].name},
                             {"parameters", flops[i].parameters},
                             {"forward_flops", flops[i].forward},
                             {"backward_flops", flops[i].backward},
                             {"forward_ms", 1e3 * times.forward[i]},
                             {"backward_ms", 1e3 * times.backward[i]},
                             {"backward_input_ms", 1e3 * times.backward_input[i]},
                             {"backward_weight_ms", 1e3 * times.backward_weight[i]}});
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "%s: the [model] GPT, a micro-batch of %lld × %lld tokens, best of %d passes in this process "
      "(%lld threads)\n",
      job.source.c_str(), static_cast<long long>(micro), static_cast<long long>(seq), repeats,
      static_cast<long long>(threads));
  std::printf("%-10s %12s %11s %9s %11s %11s %9s %11s\n", "layer", "params", "fwd GFLOP", "fwd ms",
              "fwd GFLOP/s", "bwd GFLOP", "bwd ms", "bwd GFLOP/s");
  auto row = [](const std::string& name, int64_t params, double f, double fs, double bw, double bs) {
    std::printf("%-10s %12s %11.3f %9.2f %11.1f %11.3f %9.2f %11.1f\n", name.c_str(),
                group_thousands(params).c_str(), f / 1e9, fs * 1e3, rate(f, fs) / 1e9, bw / 1e9, bs * 1e3,
                rate(bw, bs) / 1e9);
  };
  int64_t parameters = 0;
  for (std::size_t i = 0; i < flops.size(); ++i) {
    row(flops[i].name, flops[i].parameters, flops[i].forward, times.forward[i], flops[i].backward,
        times.backward[i]);
    parameters += flops[i].parameters;
  }
  row("total", parameters, forward, forward_s, backward, backward_s);
  std::printf(
      "per step: %lld micro-batches, %.3f GFLOP forward and backward (matrix products; LayerNorm, GELU "
      "and softmax left out)\n",
      static_cast<long long>(accumulation), (forward + backward) * static_cast<double>(accumulation) / 1e9);
  std::printf(
      "this process's fp32 GEMM (1024 x 1024 x 1024) reaches %.1f GFLOP/s: the model's forward and backward "
      "use %.0f%% of it (MFU)\n",
      peak / 1e9, 100 * rate(forward + backward, forward_s + backward_s) / peak);
  return 0;
}

}  // namespace troupe
