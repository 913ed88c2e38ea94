#include "tools/bench/bench_adam.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/optimizer.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double bytes_per_param = 28;  // p, g, m, v read; p, m, v written

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], FreeDeleter>;

// 64-byte aligned like the peer's arrays, so both start their vectors on cache lines.
Floats allocate(int64_t n) {
  std::size_t bytes = (static_cast<std::size_t>(n) * sizeof(float) + 63) / 64 * 64;
  return Floats(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

// Deterministic values in [-1, 1): no LibTorch, and no subnormals to slow any path down.
void fill(float* x, int64_t n, uint32_t seed) {
  uint32_t state = seed;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    x[i] = static_cast<float>(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

void report(const AdamBenchOptions& o, const char* isa, double best, double median) {
  double n = static_cast<double>(o.params);
  double mparams = n / best / 1e6;
  double gbps = bytes_per_param * n / best / 1e9;
  if (o.json) {
    nlohmann::ordered_json line{{"bench", "adam"},
                                {"params", o.params},
                                {"isa", isa},
                                {"threads", o.threads},
                                {"Mparams_per_s", mparams},
                                {"GBps", gbps},
                                {"iters", o.iters},
                                {"median_Mparams_per_s", n / median / 1e6}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf("bench=adam params=%lld isa=%s threads=%d Mparams_per_s=%.1f GBps=%.2f\n",
                static_cast<long long>(o.params), isa, o.threads, mparams, gbps);
  }
  std::fflush(stdout);
}

}  // namespace

int run_bench_adam(AdamBenchOptions o) {
  if (o.device == "cuda") return run_bench_cuda_adam(o);
  if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Status isa = kernels::select_optimizer_isa();
  if (!isa) {
    std::fprintf(stderr, "troupe: bench adam: %s\n", isa.error().message.c_str());
    return 2;
  }
  Floats p = allocate(o.params), g = allocate(o.params), m = allocate(o.params), v = allocate(o.params);
  if (!p || !g || !m || !v) {
    std::fprintf(stderr, "troupe: bench adam: cannot allocate 4 x %lld floats\n",
                 static_cast<long long>(o.params));
    return 1;
  }
  fill(p.get(), o.params, 1);
  fill(g.get(), o.params, 2);
  std::fill(m.get(), m.get() + o.params, 0.0f);
  std::fill(v.get(), v.get() + o.params, 0.0f);

  kernels::AdamParams params;  // LibTorch's AdamW defaults, as the peer uses them
  params.lr = 1e-3f;
  params.weight_decay = 0.01f;
  params.decoupled = true;
  auto step = [&](int64_t t) {
    params.step = t;
    auto start = Clock::now();
    kernels::adam_step_parallel(p.get(), g.get(), m.get(), v.get(), static_cast<std::size_t>(o.params),
                                params, kernels::Precision16::none, nullptr, o.threads);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  step(1);  // warm-up
  std::vector<double> seconds;
  for (int64_t t = 2; t < o.iters + 2; ++t) seconds.push_back(step(t));
  std::sort(seconds.begin(), seconds.end());
  report(o, kernels::optimizer_isa(), seconds.front(), seconds[seconds.size() / 2]);
  return 0;
}

}  // namespace troupe
