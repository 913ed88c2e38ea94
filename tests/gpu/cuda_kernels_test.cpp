// The CUDA kernels against their CPU twins (which the unit tests hold to LibTorch): fused
// multi-tensor AdamW/Adam with 16-bit copy-out over 100 steps, the casts, the overflow flag
// and the squared norm. Skips, saying why, where there is no usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/precision.hpp"
#include "kernels/cuda/optimizer.cuh"
#include "kernels/cuda/precision.cuh"
#include "tests/gpu/gpu_test_support.hpp"

namespace troupe {
namespace {

using testing::DeviceArray;

std::vector<float> random_floats(std::size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1e-30, std::abs(double(b[i]))));
  return worst;
}

struct Partition {
  std::vector<float> p, g, m, v;
  std::vector<uint16_t> copy;
};

// Many chunks (more than one launch's table holds) of uneven sizes, one longer than a
// launch's tiles, so the chunk table is refilled mid-chunk.
std::vector<std::size_t> chunk_sizes() {
  std::vector<std::size_t> sizes{40'000'001, 1, 17, 16384, 16385};       // 2,442 tiles: more than a launch
  for (std::size_t k = 0; k < 70; ++k) sizes.push_back(1000 + 997 * k);  // more chunks than a launch
  return sizes;
}

void run_adam(const kernels::AdamParams& base, kernels::Precision16 copy, const char* what) {
  std::vector<Partition> cpu;
  std::vector<std::unique_ptr<DeviceArray<float>>> device;
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> copies;
  std::vector<kernels::cuda::AdamChunk> chunks;
  uint32_t seed = 1;
  for (std::size_t n : chunk_sizes()) {
    Partition part{random_floats(n, 1, seed), random_floats(n, 0.1f, seed + 1), std::vector<float>(n),
                   std::vector<float>(n), std::vector<uint16_t>(n)};
    seed += 2;
    kernels::cuda::AdamChunk c;
    for (auto* values : {&part.p, &part.g, &part.m, &part.v})
      device.push_back(std::make_unique<DeviceArray<float>>(*values));
    copies.push_back(std::make_unique<DeviceArray<uint16_t>>(n));
    std::size_t at = device.size() - 4;
    c.parameters = device[at]->get();
    c.gradients = device[at + 1]->get();
    c.exp_avg = device[at + 2]->get();
    c.exp_avg_sq = device[at + 3]->get();
    c.copy_out = copies.back()->get();
    c.count = n;
    chunks.push_back(c);
    cpu.push_back(std::move(part));
  }
  for (int64_t step = 1; step <= 100; ++step) {
    kernels::AdamParams params = base;
    params.step = step;
    ASSERT_EQ(kernels::cuda::adam_step(chunks.data(), chunks.size(), params, copy, nullptr), cudaSuccess);
    for (Partition& part : cpu)
      kernels::adam_step(part.p.data(), part.g.data(), part.m.data(), part.v.data(), part.p.size(), params,
                         copy, part.copy.data());
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  double worst = 0;
  bool copies_equal = true;
  for (std::size_t k = 0; k < cpu.size(); ++k) {
    worst = std::max({worst, worst_relative(device[4 * k]->download(), cpu[k].p),
                      worst_relative(device[4 * k + 2]->download(), cpu[k].m),
                      worst_relative(device[4 * k + 3]->download(), cpu[k].v)});
    if (copy != kernels::Precision16::none) copies_equal &= copies[k]->download() == cpu[k].copy;
  }
  std::printf("%s: worst relative difference after 100 steps %.3g (CPU path %s)\n", what, worst,
              kernels::optimizer_isa());
  EXPECT_LE(worst, 1e-6) << what;
  if (std::string(kernels::optimizer_isa()) != "scalar") {
    EXPECT_EQ(worst, 0.0) << what << ": the same operations, fused in the same places";
    EXPECT_TRUE(copies_equal) << what;
  }
}

TEST(CudaKernels, AdamWEqualsTheCpuTwinOver100Steps) {
  TROUPE_SKIP_WITHOUT_GPU();
  kernels::AdamParams p;
  p.lr = 1e-3;
  p.weight_decay = 0.01;
  p.decoupled = true;
  run_adam(p, kernels::Precision16::bf16, "AdamW, bf16 copy");
}

TEST(CudaKernels, AdamWithL2DecayAndAnFp16CopyEqualsTheCpuTwin) {
  TROUPE_SKIP_WITHOUT_GPU();
  kernels::AdamParams p;
  p.lr = 3e-4;
  p.weight_decay = 0.1;
  p.decoupled = false;
  run_adam(p, kernels::Precision16::f16, "Adam, fp16 copy");
  p.weight_decay = 0;
  run_adam(p, kernels::Precision16::none, "Adam, no decay, no copy");
}

TEST(CudaKernels, CastsEqualTheCpuTwinsBitForBit) {
  TROUPE_SKIP_WITHOUT_GPU();
  std::vector<float> x = random_floats(100003, 1000, 7);
  for (float special : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, 3e38f, INFINITY, -INFINITY, NAN, -NAN})
    x.push_back(special);
  for (DataType type : {DataType::bf16, DataType::f16, DataType::f32}) {
    std::size_t n = x.size(), bytes = n * element_bytes(type);
    std::vector<uint8_t> expected(bytes), got(bytes);
    kernels::cast_from_f32(x.data(), expected.data(), n, type);
    DeviceArray<float> in(x);
    DeviceArray<uint8_t> out(bytes);
    TROUPE_CUDA_OK(kernels::cuda::cast_from_f32(in.get(), out.get(), n, type, nullptr));
    EXPECT_EQ(out.download(), expected) << data_type_name(type);
    std::vector<float> wide_expected(n);
    kernels::cast_to_f32(expected.data(), type, wide_expected.data(), n);
    DeviceArray<float> wide(n);
    TROUPE_CUDA_OK(kernels::cuda::cast_to_f32(out.get(), type, wide.get(), n, nullptr));
    std::vector<float> wide_got = wide.download();
    ASSERT_EQ(std::memcmp(wide_got.data(), wide_expected.data(), n * sizeof(float)), 0)
        << data_type_name(type);
  }
}

TEST(CudaKernels, TheOverflowFlagMatchesTheCpuTwinAndCollectsBuffers) {
  TROUPE_SKIP_WITHOUT_GPU();
  DeviceArray<int> flag(std::vector<int>{0});
  std::vector<float> clean = random_floats(1 << 20, 1e30f, 3);
  DeviceArray<float> a(clean);
  TROUPE_CUDA_OK(kernels::cuda::flag_nonfinite(a.get(), clean.size(), flag.get(), nullptr));
  EXPECT_EQ(flag.download()[0], int(kernels::has_nonfinite(clean.data(), clean.size())));
  EXPECT_EQ(flag.download()[0], 0);
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<float> dirty = clean;
    dirty[777777] = bad;
    DeviceArray<float> b(dirty);
    flag.upload({0});
    TROUPE_CUDA_OK(kernels::cuda::flag_nonfinite(b.get(), dirty.size(), flag.get(), nullptr));
    TROUPE_CUDA_OK(kernels::cuda::flag_nonfinite(a.get(), clean.size(), flag.get(), nullptr));
    EXPECT_EQ(flag.download()[0], 1) << bad
                                     << ": set by the dirty buffer, not cleared by the clean one after";
    EXPECT_TRUE(kernels::has_nonfinite(dirty.data(), dirty.size()));
  }
}

TEST(CudaKernels, TheSquaredNormEqualsTheCpuTwinAndIsTheSameOnEveryRun) {
  TROUPE_SKIP_WITHOUT_GPU();
  for (std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{1} << 20, std::size_t{10'000'019}}) {
    std::vector<float> x = random_floats(n, 3, static_cast<uint32_t>(n));
    double expected = kernels::sum_squares(x.data(), n);
    DeviceArray<float> in(x);
    DeviceArray<double> workspace(kernels::cuda::sum_squares_workspace(n)), out(1);
    TROUPE_CUDA_OK(kernels::cuda::sum_squares(in.get(), n, workspace.get(), out.get(), nullptr));
    double first = out.download()[0];
    EXPECT_NEAR(first, expected, 1e-12 * expected) << n;
    TROUPE_CUDA_OK(kernels::cuda::sum_squares(in.get(), n, workspace.get(), out.get(), nullptr));
    EXPECT_EQ(out.download()[0], first) << "a fixed summation order";
  }
}

}  // namespace
}  // namespace troupe
