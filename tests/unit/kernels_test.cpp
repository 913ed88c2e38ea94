// Reduction kernels, 16-bit conversions and the precision kernels (the CPU twins of the CUDA
// kernels) against LibTorch's own bf16, fp16 and isfinite.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/precision.hpp"
#include "kernels/cpu/reduce.hpp"

namespace troupe {
namespace {

uint16_t bits_of(const torch::Tensor& t) {
  uint16_t h;
  std::memcpy(&h, t.data_ptr(), 2);
  return h;
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

TEST(Kernels, SumOfSquaresAccumulatesInDoubleLikeLibTorch) {
  for (int64_t n : {0, 1, 7, 8, 9, 1000, 100003}) {
    torch::Tensor x = torch::randn({n});
    double expected = n == 0 ? 0.0 : x.to(torch::kFloat64).square().sum().item<double>();
    EXPECT_NEAR(kernels::sum_squares(x.data_ptr<float>(), static_cast<std::size_t>(n)), expected,
                1e-12 * std::max(1.0, expected))
        << n;
  }
}

TEST(Kernels, WideningEvery16BitPatternMatchesLibTorch) {
  for (uint32_t pattern = 0; pattern < 65536; ++pattern) {
    uint16_t h = static_cast<uint16_t>(pattern);
    auto bf = torch::empty({1}, torch::kBFloat16);
    auto hf = torch::empty({1}, torch::kHalf);
    std::memcpy(bf.data_ptr(), &h, 2);
    std::memcpy(hf.data_ptr(), &h, 2);
    ASSERT_TRUE(same_float(kernels::bf16_to_float(h), bf.to(torch::kFloat).item<float>())) << pattern;
    ASSERT_TRUE(same_float(kernels::f16_to_float(h), hf.to(torch::kFloat).item<float>())) << pattern;
  }
}

TEST(Kernels, NarrowingRoundsToNearestEvenLikeLibTorch) {
  std::mt19937 rng(3);
  std::vector<float> values = {0.0f,    -0.0f,    1.0f,     65504.0f, 65519.0f, 65520.0f, 1e-8f,
                               6.1e-5f, 5.96e-8f, 2.98e-8f, 3e38f,    -3e38f,   INFINITY, -INFINITY};
  std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f), narrow(-1e-4f, 1e-4f);
  for (int i = 0; i < 20000; ++i) values.push_back(i % 2 ? wide(rng) : narrow(rng));
  for (float v : values) {
    auto t = torch::full({1}, v);
    EXPECT_EQ(kernels::float_to_bf16(v), bits_of(t.to(torch::kBFloat16))) << v;
    EXPECT_EQ(kernels::float_to_f16(v), bits_of(t.to(torch::kHalf))) << v;
  }
  EXPECT_TRUE(std::isnan(kernels::bf16_to_float(kernels::float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(kernels::f16_to_float(kernels::float_to_f16(NAN))));
}

TEST(Kernels, SixteenBitAddsInFp32AndRoundsOnceLikeLibTorch) {
  for (auto [type, dtype] :
       {std::pair{DataType::bf16, torch::kBFloat16}, std::pair{DataType::f16, torch::kHalf}}) {
    auto a = torch::randn({1001}).to(dtype), b = torch::randn({1001}).to(dtype);
    auto expected = (a.to(torch::kFloat) + b.to(torch::kFloat)).to(dtype);
    auto got = a.clone();
    kernels::add_into(got.data_ptr(), b.data_ptr(), 1001, type);
    EXPECT_TRUE(torch::equal(got, expected)) << data_type_name(type);
    auto scaled = a.clone();
    kernels::scale(scaled.data_ptr(), 1001, 0.25f, type);
    EXPECT_TRUE(torch::equal(scaled, (a.to(torch::kFloat) * 0.25f).to(dtype))) << data_type_name(type);
  }
}

TEST(Kernels, Fp32AddAndScaleMatchLibTorch) {
  auto a = torch::randn({4099}), b = torch::randn({4099});
  auto got = a.clone();
  kernels::add_into(got.data_ptr<float>(), b.data_ptr<float>(), 4099);
  EXPECT_TRUE(torch::equal(got, a + b));
  kernels::scale(got.data_ptr<float>(), 4099, 0.5f);
  EXPECT_TRUE(torch::equal(got, (a + b) * 0.5f));
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TEST(PrecisionKernels, CastsMatchLibTorchBitForBitBothWays) {
  torch::Tensor x = torch::cat({torch::randn({10007}) * 1000, torch::randn({1000}) * 1e-6,
                                torch::tensor({0.0f, -0.0f, 65520.0f, 1e30f, -INFINITY, INFINITY})});
  auto n = static_cast<std::size_t>(x.numel());
  for (auto [type, dtype] :
       {std::pair{DataType::bf16, torch::kBFloat16}, std::pair{DataType::f16, torch::kHalf}}) {
    torch::Tensor narrow = torch::empty({x.numel()}, dtype);
    kernels::cast_from_f32(x.data_ptr<float>(), narrow.data_ptr(), n, type);
    EXPECT_TRUE(torch::equal(narrow, x.to(dtype))) << data_type_name(type);
    torch::Tensor wide = torch::empty({x.numel()});
    kernels::cast_to_f32(narrow.data_ptr(), type, wide.data_ptr<float>(), n);
    EXPECT_TRUE(torch::equal(wide, narrow.to(torch::kFloat))) << data_type_name(type);
  }
  torch::Tensor copy = torch::empty({x.numel()});
  kernels::cast_from_f32(x.data_ptr<float>(), copy.data_ptr(), n, DataType::f32);
  EXPECT_TRUE(torch::equal(copy, x));
}

TEST(PrecisionKernels, NonfiniteIsFoundWhereverItIsLikeLibTorchIsfinite) {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    for (int64_t at : {0, 1, 4095, 9999}) {
      torch::Tensor x = torch::randn({10000}) * 1e30;
      x[at] = bad;
      EXPECT_EQ(kernels::has_nonfinite(x.data_ptr<float>(), 10000), !torch::isfinite(x).all().item<bool>())
          << bad << " at " << at;
      EXPECT_TRUE(kernels::has_nonfinite(x.data_ptr<float>(), 10000));
      EXPECT_EQ(kernels::has_nonfinite(x.data_ptr<float>(), static_cast<std::size_t>(at)), false)
          << "only the first " << at << " elements";
    }
  }
  torch::Tensor big = torch::full({100}, 3.4e38f);
  EXPECT_FALSE(kernels::has_nonfinite(big.data_ptr<float>(), 100)) << "large but finite";
}

}  // namespace
}  // namespace troupe
