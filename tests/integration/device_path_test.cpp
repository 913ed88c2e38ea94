// The GPU rank's path through the actors, run on the CPU between real processes
// (device_path_rank.cpp): the stage on an IssuingStream, gradient rows all-reduced as
// device requests staged over UCX, the fused device Adam (its CPU twin here), the host
// mirror of [offload], and LibTorch's optimizer on the device tensors. Each trains like the
// plain host path, step for step, and ends with the same parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe {
namespace {

struct Trained {
  std::vector<double> losses;
  double parameter_norm = 0;
};

Trained train(int ranks, const std::string& mode) {
  auto r = testing::run_command(std::string(TROUPE_BINARY) + " launch --ranks " + std::to_string(ranks) +
                                    " -- " + DEVICE_PATH_RANK_BINARY + " " +
                                    std::to_string(testing::free_port()) + " " + mode + " 12",
                                120);
  EXPECT_EQ(r.exit_code, 0) << mode << ": " << r.output;
  Trained run;
  run.losses = testing::printed_losses(r.output);
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (auto at = line.find("parameter-norm "); at != std::string::npos)
      std::sscanf(line.c_str() + at, "parameter-norm %lf", &run.parameter_norm);
  return run;
}

void expect_same_training(const Trained& path, const Trained& host, double tolerance,
                          const std::string& what) {
  ASSERT_EQ(path.losses.size(), 12u) << what;
  ASSERT_EQ(host.losses.size(), 12u) << what;
  for (std::size_t s = 0; s < host.losses.size(); ++s)
    EXPECT_NEAR(path.losses[s], host.losses[s], tolerance * std::abs(host.losses[s]))
        << what << ", step " << s + 1;
  EXPECT_LT(host.losses.back(), host.losses.front())
      << "the model must learn for the comparison to mean much";
  EXPECT_GT(host.parameter_norm, 0);
  EXPECT_NEAR(path.parameter_norm, host.parameter_norm, tolerance * host.parameter_norm) << what;
}

class DevicePath : public ::testing::TestWithParam<int> {};

TEST_P(DevicePath, TrainsLikeTheHostPath) {
  int ranks = GetParam();
  Trained host = train(ranks, "host");
  // The same fused arithmetic on the same reduced gradients: the same values.
  expect_same_training(train(ranks, "device"), host, 1e-6, "device Adam");
  expect_same_training(train(ranks, "device-offload"), host, 1e-6, "host mirror");
  // LibTorch's AdamW: bit for bit on AVX CPUs, a few ulp apart on the scalar path.
  expect_same_training(train(ranks, "device-torch"), host, 1e-5, "LibTorch's AdamW");
}

INSTANTIATE_TEST_SUITE_P(Ranks, DevicePath, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "Ranks"; });

}  // namespace
}  // namespace troupe
