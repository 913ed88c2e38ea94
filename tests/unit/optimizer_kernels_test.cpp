// Fused optimizer kernels against LibTorch's own torch::optim::Adam, AdamW and SGD, on every
// instruction-set path this CPU has (the others are skipped). LibTorch 2 from PyTorch's wheel
// takes a float tensor's square root from MKL's vector math, which is not correctly rounded
// (about 0.7% of the results 1 ulp off): Adam is also held, bit for bit, to LibTorch's own
// operations in its order with a correctly rounded square root, and to LibTorch's optimizer
// bit for bit only where LibTorch's square root is correctly rounded (Debian's 1.13 was).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/reduce.hpp"

namespace troupe {
namespace {

using kernels::AdamParams;
using kernels::Precision16;
using kernels::SgdParams;

constexpr int64_t big = 1000003;  // not a multiple of any vector or chunk
constexpr double tolerance = 1e-6;
// Element-wise, a difference is measured against max(|expected|, floor): the data are unit
// normal, so values that pass near zero (a moment that cancels) are held to 1e-6 of the data's
// scale rather than to a relative bound on nothing. A path whose FMA placement differs from the
// LibTorch kernels it is compared with (the scalar path against LibTorch's AVX2/AVX-512 kernels,
// or the reverse under ATEN_CPU_CAPABILITY=default) drifts by a few ulp a step: measured, the
// worst element is 3.5e-7 after 100 Adam steps and 6.3e-7 after 50 SGD steps with momentum
// (lr 0.01), and a path compared with its own LibTorch kernels is bit-exact. Wrong arithmetic
// (a missing bias correction, decay in the wrong place) is off by 1e-4 or more.
constexpr double floor_magnitude = 1.0;

// How closely a kernel's array agrees with LibTorch's tensor; printed so a run shows how much of
// the agreement is exact.
struct Agreement {
  double max_diff = 0, max_expected = 0, worst_element = 0;
  int64_t exact = 0, n = 0;
};

Agreement agreement(const float* got, const torch::Tensor& expected) {
  const float* want = expected.data_ptr<float>();
  Agreement a;
  a.n = expected.numel();
  for (int64_t i = 0; i < a.n; ++i) {
    double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    a.exact += got[i] == want[i];
    a.max_diff = std::max(a.max_diff, diff);
    a.max_expected = std::max(a.max_expected, std::fabs(static_cast<double>(want[i])));
    a.worst_element = std::max(a.worst_element, diff / std::max<double>(std::fabs(want[i]), floor_magnitude));
  }
  return a;
}

void expect_agrees(const std::string& what, const float* got, const torch::Tensor& expected,
                   bool bit_exact = true) {
  Agreement a = agreement(got, expected);
  double relative = a.max_expected > 0 ? a.max_diff / a.max_expected : a.max_diff;
  std::printf("  %-34s max|diff|/max|x| %.3g  worst element %.3g  bit-exact %.4f%%\n", what.c_str(), relative,
              a.worst_element, a.n ? 100.0 * static_cast<double>(a.exact) / static_cast<double>(a.n) : 100.0);
  EXPECT_LE(relative, tolerance) << what;
  EXPECT_LE(a.worst_element, tolerance) << what;
  // What docs/DESIGN.md claims: the AVX2 and AVX-512 paths fuse exactly where LibTorch does,
  // so every element is bit-identical; only the scalar fallback is within rounding.
  if (bit_exact && std::string(kernels::optimizer_isa()) != "scalar") {
    EXPECT_EQ(a.exact, a.n) << what << " on " << kernels::optimizer_isa()
                            << ": not bit-identical to LibTorch";
  }
}

// Whether LibTorch's float square root is correctly rounded here (MKL's vector math is not).
bool libtorch_sqrt_is_correctly_rounded() {
  static const bool exact = [] {
    torch::manual_seed(17);
    torch::Tensor x = torch::rand({1 << 16});
    return torch::equal(x.sqrt(), x.to(torch::kDouble).sqrt().to(torch::kFloat));
  }();
  return exact;
}

// LibTorch's C++ Adam and AdamW step (torch/csrc/api/src/optim/adam.cpp and adamw.cpp), its
// tensor operations in its order, with the square root correctly rounded: the float square
// root of the double one (a double carries more than twice a float's bits, so rounding twice
// gives the correctly rounded float).
struct AdamAsLibTorchComputesIt {
  torch::Tensor p, m, v;
  void step(const torch::Tensor& grad, const AdamParams& a, int t) {
    torch::Tensor g = grad;
    if (a.decoupled)
      p.mul_(1 - a.lr * a.weight_decay);
    else if (a.weight_decay != 0)
      g = g.add(p, a.weight_decay);
    const double bias_correction1 = 1 - std::pow(a.beta1, t), bias_correction2 = 1 - std::pow(a.beta2, t);
    m.mul_(a.beta1).add_(g, 1 - a.beta1);
    v.mul_(a.beta2).addcmul_(g, g, 1 - a.beta2);
    torch::Tensor root = v.to(torch::kDouble).sqrt().to(torch::kFloat);
    torch::Tensor denom = (root / std::sqrt(bias_correction2)).add_(a.eps);
    p.addcdiv_(m, denom, -a.lr / bias_correction1);
  }
};

// The first and second moments LibTorch's Adam or AdamW keeps for its only parameter.
std::pair<torch::Tensor, torch::Tensor> moments(torch::optim::Optimizer& optimizer) {
  auto& state = *optimizer.state().begin()->second;
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(&state))
    return {adam->exp_avg(), adam->exp_avg_sq()};
  auto& adamw = dynamic_cast<torch::optim::AdamWParamState&>(state);
  return {adamw.exp_avg(), adamw.exp_avg_sq()};
}

// `steps` steps of adam_step and of LibTorch's Adam or AdamW on the same parameters and fresh
// random gradients; the options are the kernel's floats widened, as the header asks.
void compare_adam(const AdamParams& params, int64_t n, int steps, const std::string& label) {
  torch::manual_seed(11);
  torch::Tensor initial = torch::randn({n});
  torch::Tensor reference = initial.clone().set_requires_grad(true);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::tuple<double, double> betas{params.beta1, params.beta2};
  if (params.decoupled)
    optimizer = std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{reference},
        torch::optim::AdamWOptions(params.lr).betas(betas).eps(params.eps).weight_decay(params.weight_decay));
  else
    optimizer = std::make_unique<torch::optim::Adam>(
        std::vector<torch::Tensor>{reference},
        torch::optim::AdamOptions(params.lr).betas(betas).eps(params.eps).weight_decay(params.weight_decay));
  // One element of slack each side, never written, catches a kernel that strays past n; the
  // arrays start one float off the allocation's alignment.
  const float sentinel = -12345.0f;
  std::vector<float> p(static_cast<std::size_t>(n) + 2, sentinel), m(p.size(), sentinel),
      v(p.size(), sentinel);
  if (n > 0)
    std::memcpy(p.data() + 1, initial.data_ptr<float>(), static_cast<std::size_t>(n) * sizeof(float));
  std::fill(m.begin() + 1, m.end() - 1, 0.0f);
  std::fill(v.begin() + 1, v.end() - 1, 0.0f);
  AdamAsLibTorchComputesIt replica{initial.clone(), torch::zeros({n}), torch::zeros({n})};
  AdamParams step = params;
  for (int t = 1; t <= steps; ++t) {
    torch::Tensor g = torch::randn({n});
    reference.mutable_grad() = g;
    optimizer->step();
    replica.step(g, params, t);
    step.step = t;
    kernels::adam_step(p.data() + 1, g.data_ptr<float>(), m.data() + 1, v.data() + 1,
                       static_cast<std::size_t>(n), step);
  }
  for (auto* a : {&p, &m, &v}) {
    EXPECT_EQ(a->front(), sentinel) << label;
    EXPECT_EQ(a->back(), sentinel) << label;
  }
  torch::NoGradGuard no_grad;
  const bool exact_sqrt = libtorch_sqrt_is_correctly_rounded();
  expect_agrees(label + " p", p.data() + 1, reference.detach(), exact_sqrt);
  expect_agrees(label + " p, its operations", p.data() + 1, replica.p);
  if (n == 0) return;
  auto [exp_avg, exp_avg_sq] = moments(*optimizer);
  expect_agrees(label + " m", m.data() + 1, exp_avg, exact_sqrt);
  expect_agrees(label + " v", v.data() + 1, exp_avg_sq, exact_sqrt);
  expect_agrees(label + " m, its operations", m.data() + 1, replica.m);
  expect_agrees(label + " v, its operations", v.data() + 1, replica.v);
}

void compare_sgd(const SgdParams& params, int64_t n, int steps, const std::string& label) {
  torch::manual_seed(13);
  torch::Tensor initial = torch::randn({n});
  torch::Tensor reference = initial.clone().set_requires_grad(true);
  torch::optim::SGD optimizer({reference}, torch::optim::SGDOptions(params.lr)
                                               .momentum(params.momentum)
                                               .dampening(params.dampening)
                                               .weight_decay(params.weight_decay)
                                               .nesterov(params.nesterov));
  const float sentinel = -12345.0f;
  std::vector<float> p(static_cast<std::size_t>(n) + 2, sentinel), buffer(p.size(), sentinel);
  if (n > 0)
    std::memcpy(p.data() + 1, initial.data_ptr<float>(), static_cast<std::size_t>(n) * sizeof(float));
  SgdParams step = params;
  for (int t = 1; t <= steps; ++t) {
    torch::Tensor g = torch::randn({n});
    reference.mutable_grad() = g;
    optimizer.step();
    step.first_step = t == 1;
    kernels::sgd_step(p.data() + 1, g.data_ptr<float>(), buffer.data() + 1, static_cast<std::size_t>(n),
                      step);
  }
  for (auto* a : {&p, &buffer}) {
    EXPECT_EQ(a->front(), sentinel) << label;
    EXPECT_EQ(a->back(), sentinel) << label;
  }
  torch::NoGradGuard no_grad;
  expect_agrees(label + " p", p.data() + 1, reference.detach());
}

AdamParams adamw() {
  AdamParams a;
  a.lr = 1e-3f;
  a.weight_decay = 0.01f;
  a.decoupled = true;
  return a;
}

AdamParams adam_l2() {
  AdamParams a = adamw();
  a.decoupled = false;
  return a;
}

std::vector<SgdParams> sgd_variants() {
  SgdParams heavy_ball{0.01f, 0.9f, 0.1f, 0.01f, false, false};
  SgdParams nesterov{0.01f, 0.9f, 0.0f, 0.01f, true, false};
  SgdParams plain{0.01f, 0.0f, 0.0f, 0.0f, false, false};
  return {heavy_ball, nesterov, plain};
}

std::string sgd_label(const SgdParams& s) {
  return s.momentum == 0 ? "SGD" : s.nesterov ? "SGD nesterov" : "SGD momentum+dampening";
}

// Each test runs once per path; a path the CPU lacks is skipped.
class OnEachIsa : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!kernels::optimizer_isa_supported(GetParam())) GTEST_SKIP() << "this CPU lacks " << GetParam();
    ASSERT_TRUE(kernels::select_optimizer_isa(GetParam()).ok());
    ASSERT_EQ(std::string(kernels::optimizer_isa()), GetParam());
  }
};

TEST_P(OnEachIsa, AdamWMatchesLibTorchOverAHundredSteps) {
  compare_adam(adamw(), big, 100, GetParam() + " AdamW");
}

TEST_P(OnEachIsa, AdamWithWeightDecayMatchesLibTorchOverAHundredSteps) {
  compare_adam(adam_l2(), big, 100, GetParam() + " Adam");
}

TEST_P(OnEachIsa, AdamWithoutWeightDecayMatchesLibTorch) {
  AdamParams a = adam_l2();
  a.weight_decay = 0;
  a.beta1 = 0.8f;
  a.beta2 = 0.95f;
  a.eps = 1e-6f;
  compare_adam(a, big, 20, GetParam() + " Adam wd=0");
}

TEST_P(OnEachIsa, SgdMatchesLibTorchOverFiftySteps) {
  for (const SgdParams& s : sgd_variants()) compare_sgd(s, big, 50, GetParam() + " " + sgd_label(s));
}

TEST_P(OnEachIsa, TailsMatchLibTorchAndNothingPastTheEndIsWritten) {
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100}) {
    std::string size = " n=" + std::to_string(n);
    compare_adam(adamw(), n, 3, GetParam() + " AdamW" + size);
    compare_adam(adam_l2(), n, 3, GetParam() + " Adam" + size);
    for (const SgdParams& s : sgd_variants()) compare_sgd(s, n, 3, GetParam() + " " + sgd_label(s) + size);
  }
}

uint16_t convert(Precision16 precision, float x) {
  return precision == Precision16::bf16 ? kernels::float_to_bf16(x) : kernels::float_to_f16(x);
}

// Runs one step with a 16-bit copy and checks every copied value against reduce.hpp's conversion
// of the fp32 result, bit for bit.
void expect_copy_is_conversion(std::vector<float> p, const std::vector<float>& g, const AdamParams& params,
                               Precision16 precision, const std::string& label) {
  std::size_t n = p.size();
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<uint16_t> copy(n + 1, 0xdead);
  kernels::adam_step(p.data(), g.data(), m.data(), v.data(), n, params, precision, copy.data());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (copy[i] != convert(precision, p[i]) && wrong++ < 5)
      ADD_FAILURE() << label << " element " << i << ": p " << p[i] << " copied as 0x" << std::hex << copy[i]
                    << ", expected 0x" << convert(precision, p[i]);
  EXPECT_EQ(wrong, 0u) << label;
  EXPECT_EQ(copy[n], 0xdead) << label << ": written past the end";
}

TEST_P(OnEachIsa, SixteenBitCopyIsTheConversionOfTheFp32Result) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> p(big), g(big);
  for (auto& x : p) x = normal(rng);
  for (auto& x : g) x = normal(rng);
  for (Precision16 precision : {Precision16::bf16, Precision16::f16}) {
    std::string name = GetParam() + (precision == Precision16::bf16 ? " bf16" : " fp16");
    expect_copy_is_conversion(p, g, adamw(), precision, name + " AdamW");
    expect_copy_is_conversion(p, g, adam_l2(), precision, name + " Adam");
  }
}

// With lr = 0 and no weight decay the step leaves p as it is (p + −0), so p can be any bit
// pattern: NaNs with payloads, infinities, subnormals, halfway cases, values that overflow fp16.
TEST_P(OnEachIsa, SixteenBitCopyRoundsEveryKindOfValueLikeTheConversions) {
  std::vector<float> p = {0.0f,     -0.0f,     INFINITY, -INFINITY, NAN,      -NAN,     65504.0f, 65519.0f,
                          65520.0f, -65520.0f, 1e-8f,    6.1e-5f,   5.96e-8f, 2.98e-8f, 3e38f,    1e-40f};
  for (uint32_t bits : {0x7f800001u, 0xffc12345u, 0x3f808000u, 0x3f818000u, 0x33800000u, 0x477fefffu}) {
    float x;
    std::memcpy(&x, &bits, 4);
    p.push_back(x);
  }
  std::mt19937 rng(9);
  for (int i = 0; i < 100003; ++i) {
    uint32_t bits = rng();
    float x;
    std::memcpy(&x, &bits, 4);
    p.push_back(x);
  }
  std::vector<float> g(p.size(), 0.0f);
  AdamParams frozen;
  frozen.lr = 0;
  for (Precision16 precision : {Precision16::bf16, Precision16::f16})
    expect_copy_is_conversion(p, g, frozen, precision,
                              GetParam() + (precision == Precision16::bf16 ? " bf16" : " fp16"));
}

TEST_P(OnEachIsa, ThreadCountsGiveBitIdenticalResults) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> p0(big), g(big);
  for (auto& x : p0) x = normal(rng);
  for (auto& x : g) x = normal(rng);
  struct Run {
    std::vector<float> p, m, v;
    std::vector<uint16_t> copy;
  };
  auto run = [&](int threads) {
    Run r{p0, std::vector<float>(big, 0.0f), std::vector<float>(big, 0.0f), std::vector<uint16_t>(big)};
    AdamParams params = adamw();
    for (int t = 1; t <= 3; ++t) {
      params.step = t;
      kernels::adam_step_parallel(r.p.data(), g.data(), r.m.data(), r.v.data(), big, params,
                                  Precision16::bf16, r.copy.data(), threads);
    }
    return r;
  };
  Run one = run(1);
  for (int threads : {2, 3}) {
    Run many = run(threads);
    EXPECT_EQ(std::memcmp(one.p.data(), many.p.data(), big * sizeof(float)), 0) << threads;
    EXPECT_EQ(std::memcmp(one.m.data(), many.m.data(), big * sizeof(float)), 0) << threads;
    EXPECT_EQ(std::memcmp(one.v.data(), many.v.data(), big * sizeof(float)), 0) << threads;
    EXPECT_EQ(std::memcmp(one.copy.data(), many.copy.data(), big * sizeof(uint16_t)), 0) << threads;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, OnEachIsa, ::testing::Values("scalar", "avx2", "avx512"),
                         [](const auto& info) { return info.param; });

std::string cpu_flags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("flags", 0) == 0) return line + " ";
  return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
  return flags.find(" " + flag + " ") != std::string::npos;
}

TEST(OptimizerIsa, SupportAgreesWithProcCpuinfo) {
  std::string flags = cpu_flags();
  ASSERT_FALSE(flags.empty()) << "no flags in /proc/cpuinfo";
  EXPECT_TRUE(kernels::optimizer_isa_supported("scalar"));
  EXPECT_EQ(kernels::optimizer_isa_supported("avx2"),
            has_flag(flags, "avx2") && has_flag(flags, "fma") && has_flag(flags, "f16c"));
  EXPECT_EQ(kernels::optimizer_isa_supported("avx512"), has_flag(flags, "avx512f"));
}

TEST(OptimizerIsa, UnknownOrUnsupportedNamesAreErrors) {
  Status unknown = kernels::select_optimizer_isa("sse9");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("scalar, avx2 or avx512"), std::string::npos)
      << unknown.error().message;
  for (const char* name : {"avx2", "avx512"}) {
    if (!kernels::optimizer_isa_supported(name)) {
      EXPECT_FALSE(kernels::select_optimizer_isa(name).ok()) << name;
    }
  }
}

TEST(OptimizerIsa, EnvironmentVariableForcesAPathAndUnsetMeansTheBest) {
  ASSERT_EQ(setenv("TROUPE_KERNEL_ISA", "scalar", 1), 0);
  ASSERT_TRUE(kernels::select_optimizer_isa().ok());
  EXPECT_STREQ(kernels::optimizer_isa(), "scalar");

  ASSERT_EQ(setenv("TROUPE_KERNEL_ISA", "neon", 1), 0);
  Status bad = kernels::select_optimizer_isa();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("TROUPE_KERNEL_ISA=neon"), std::string::npos) << bad.error().message;

  ASSERT_EQ(unsetenv("TROUPE_KERNEL_ISA"), 0);
  ASSERT_TRUE(kernels::select_optimizer_isa().ok());
  std::string best = kernels::optimizer_isa_supported("avx512") ? "avx512"
                     : kernels::optimizer_isa_supported("avx2") ? "avx2"
                                                                : "scalar";
  EXPECT_EQ(kernels::optimizer_isa(), best);
}

}  // namespace
}  // namespace troupe
