// Reduction kernels and 16-bit conversions against LibTorch's own bf16 and fp16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

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
