#include "actors/gradient_buckets.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "base/check.hpp"

namespace troupe {

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> parameters, int64_t bucket_bytes, Post post)
    : parameters_(std::move(parameters)), post_(std::move(post)) {
  TROUPE_CHECK(bucket_bytes > 0, "bucket size must be positive");
  std::size_t total = 0;
  for (const auto& p : parameters_) total += static_cast<std::size_t>(p.numel());
  flat_ = std::make_shared<HostBuffer>(total * sizeof(float));

  auto bucket_floats = static_cast<std::size_t>(bucket_bytes) / sizeof(float);
  bucket_of_.resize(parameters_.size());
  std::size_t offset = 0;
  for (std::size_t k = parameters_.size(); k-- > 0;) {
    auto& p = parameters_[k];
    TROUPE_CHECK(p.scalar_type() == torch::kFloat32, "gradient buckets hold fp32 parameters");
    auto n = static_cast<std::size_t>(p.numel());
    if (buckets_.empty() || (buckets_.back().count > 0 && buckets_.back().count + n > bucket_floats))
      buckets_.push_back(Bucket{offset, 0, 0, 0, false});
    buckets_.back().count += n;
    buckets_.back().parameters += 1;
    bucket_of_[k] = buckets_.size() - 1;
    p.mutable_grad() = torch::from_blob(flat_->as<float>() + offset, p.sizes(), torch::kFloat32);
    offset += n;

    auto accumulator = torch::autograd::impl::grad_accumulator(p);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_final(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

void GradientBuckets::begin_step() {
  std::memset(flat_->data(), 0, flat_->bytes());
  for (auto& b : buckets_) b.posted = false;
}

void GradientBuckets::begin_micro(bool last) {
  last_micro_ = last;
  for (auto& b : buckets_) b.ready = 0;
}

void GradientBuckets::on_gradient_final(std::size_t parameter) {
  if (!last_micro_) return;
  std::size_t index = bucket_of_[parameter];
  Bucket& b = buckets_[index];
  if (++b.ready == b.parameters) post(index);
}

void GradientBuckets::flush() {
  for (std::size_t i = 0; i < buckets_.size(); ++i)
    if (!buckets_[i].posted) post(i);
}

void GradientBuckets::post(std::size_t index) {
  Bucket& b = buckets_[index];
  TROUPE_CHECK(!b.posted, "a gradient bucket was posted twice in one step");
  b.posted = true;
  post_(index, float_span(flat_, b.begin, b.count));
}

}  // namespace troupe
