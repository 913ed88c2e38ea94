#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/optimizer.cuh"
#include "tools/bench/bench_adam.hpp"

namespace troupe {
namespace {

// Device memory that frees itself.
struct DeviceFloats {
  float* data = nullptr;
  explicit DeviceFloats(std::size_t n) {
    if (cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(float)) != cudaSuccess) data = nullptr;
  }
  ~DeviceFloats() { cudaFree(data); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
};

int fail(const std::string& what, cudaError_t e) {
  std::fprintf(stderr, "troupe: bench adam --device cuda: %s: %s\n", what.c_str(), cudaGetErrorString(e));
  return 2;
}

// Milliseconds of `work` on the default stream, best of `iters` after one warm-up.
template <class Work>
float best_ms(int64_t iters, Work work) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  work(int64_t{1});
  float best = 1e30f;
  for (int64_t i = 0; i < iters; ++i) {
    cudaEventRecord(start);
    work(i + 2);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::min(best, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace

int run_bench_cuda_adam(const AdamBenchOptions& o) {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) return fail("no usable GPU", e);
  auto n = static_cast<std::size_t>(o.params);
  DeviceFloats p(n), g(n), m(n), v(n);
  if (!p.data || !g.data || !m.data || !v.data) return fail("allocating 4 arrays", cudaErrorMemoryAllocation);
  cudaMemset(p.data, 0, n * 4);
  cudaMemset(g.data, 0, n * 4);
  cudaMemset(m.data, 0, n * 4);
  cudaMemset(v.data, 0, n * 4);
  kernels::cuda::AdamChunk chunk;
  chunk.parameters = p.data;
  chunk.gradients = g.data;
  chunk.exp_avg = m.data;
  chunk.exp_avg_sq = v.data;
  chunk.count = n;
  kernels::AdamParams params;  // LibTorch's AdamW defaults with weight decay, as the CPU bench
  params.weight_decay = 0.01;
  params.decoupled = true;
  cudaError_t launched = cudaSuccess;
  float adam_ms = best_ms(o.iters, [&](int64_t step) {
    params.step = step;
    if (cudaError_t e = kernels::cuda::adam_step(&chunk, 1, params, kernels::Precision16::none, nullptr);
        e != cudaSuccess)
      launched = e;
  });
  if (launched != cudaSuccess) return fail("launching the AdamW kernel", launched);
  // The memory bound: copy 2 of the arrays' bytes (p,g → m,v): reads and writes counted.
  float copy_ms = best_ms(o.iters, [&](int64_t) {
    cudaMemcpyAsync(m.data, p.data, n * 4, cudaMemcpyDeviceToDevice);
    cudaMemcpyAsync(v.data, g.data, n * 4, cudaMemcpyDeviceToDevice);
  });
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return fail("running the kernels", e);
  double mparams = static_cast<double>(n) / (adam_ms * 1e-3) / 1e6;
  double gbps = 28.0 * static_cast<double>(n) / (adam_ms * 1e-3) / 1e9;
  double copy_gbps = 16.0 * static_cast<double>(n) / (copy_ms * 1e-3) / 1e9;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  if (o.json) {
    nlohmann::json j = {{"bench", "adam"},          {"device", "cuda"},
                        {"gpu", prop.name},         {"params", o.params},
                        {"Mparams_per_s", mparams}, {"GBps", gbps},
                        {"copy_GBps", copy_gbps},   {"fraction_of_copy", gbps / copy_gbps}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "bench=adam device=cuda gpu=\"%s\" params=%lld Mparams_per_s=%.1f GBps=%.1f copy_GBps=%.1f "
        "fraction_of_copy=%.2f\n",
        prop.name, static_cast<long long>(o.params), mparams, gbps, copy_gbps, gbps / copy_gbps);
  }
  return 0;
}

}  // namespace troupe
