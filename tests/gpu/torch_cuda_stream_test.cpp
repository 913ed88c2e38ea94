// LibTorch on a troupe CUDA stream: inside a TorchStreamGuard LibTorch's current stream is
// the CudaStream's, its kernels run there, and the stream's Event says when they are done.
// Built only with a LibTorch that has CUDA; skips, saying why, where there is no usable GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <future>

#include "actors/torch_stream_guard.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace troupe {
namespace {

TEST(TorchStreamGuard, LibTorchWorkRunsOnTheRanksComputeStream) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto stream = CudaStream::make("compute", 0, CudaStream::Priority::normal, nullptr,
                                 [](const std::string& what) { ADD_FAILURE() << what; });
  ASSERT_TRUE(stream.ok()) << stream.error().message;
  torch::Tensor y;
  {
    TorchStreamGuard guard(**stream);
    EXPECT_EQ(static_cast<void*>(c10::cuda::getCurrentCUDAStream().stream()), (*stream)->native());
    auto x = torch::ones({1 << 22}, torch::TensorOptions().device(torch::kCUDA, 0));
    y = torch::matmul(x.view({2048, 2048}), x.view({2048, 2048})).sum();
  }
  EXPECT_NE(static_cast<void*>(c10::cuda::getCurrentCUDAStream().stream()), (*stream)->native())
      << "the guard restores LibTorch's stream";
  auto done = std::make_shared<std::promise<void>>();
  (*stream)->record().on_complete([done] { done->set_value(); });
  ASSERT_EQ(done->get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(y.cpu().item<float>(), 2048.0f * 2048.0f * 2048.0f);
}

}  // namespace
}  // namespace troupe
