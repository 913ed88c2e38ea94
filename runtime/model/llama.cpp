#include "runtime/model/llama.hpp"

#include <cmath>
#include <string>

#include <torch/torch.h>

#include "base/check.hpp"
#include "runtime/model/attention.hpp"
#include "runtime/model/linear.hpp"

namespace troupe {
namespace {

constexpr double kInitStd = 0.02;

torch::nn::Linear make_linear(int64_t in, int64_t out, double std) {
  torch::nn::Linear linear(torch::nn::LinearOptions(in, out).bias(false));
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  return linear;
}

// As GPT's: the projections that add into the residual stream, two per block.
double residual_std(const ModelConfig& model) {
  return kInitStd / std::sqrt(2.0 * static_cast<double>(model.n_layers));
}

torch::Tensor project(const torch::nn::Linear& module, const torch::Tensor& x) {
  return linear(x, module->weight, torch::Tensor());  // see gpt.cpp's apply_linear
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

RmsNormImpl::RmsNormImpl(int64_t width, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({width}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  return forward_with(x, weight);
}

torch::Tensor RmsNormImpl::forward_with(const torch::Tensor& x, const torch::Tensor& w) const {
  const auto wide = x.to(torch::kFloat32);
  const auto normalized = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return w * normalized.to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t length, int64_t head_width, double theta,
                                                      const torch::TensorOptions& options) {
  const auto fp32 = options.dtype(torch::kFloat32);
  const auto exponents = torch::arange(0, head_width, 2, options.dtype(torch::kInt64)).to(torch::kFloat32) /
                         static_cast<double>(head_width);
  const auto inverse_frequencies = 1.0 / torch::pow(theta, exponents);
  const auto angles = torch::outer(torch::arange(length, fp32), inverse_frequencies);  // [T, D/2]
  const auto both = torch::cat({angles, angles}, -1);
  return {both.cos(), both.sin()};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos.to(x.scalar_type()) + rotate_half(x) * sin.to(x.scalar_type());
}

LlamaEmbeddingImpl::LlamaEmbeddingImpl(const ModelConfig& model) {
  token_ = register_module("token", torch::nn::Embedding(model.vocab_size, model.d_model));
  torch::NoGradGuard no_grad;
  token_->weight.normal_(0.0, kInitStd);
}

torch::Tensor LlamaEmbeddingImpl::forward(torch::Tensor tokens) {
  TORCH_CHECK(tokens.dim() == 2, "LlamaEmbedding expects tokens [B,T], got ", tokens.sizes());
  return token_(tokens);
}

LlamaBlockImpl::LlamaBlockImpl(const ModelConfig& model)
    : heads_(model.n_heads),
      kv_heads_(model.n_kv_heads > 0 ? model.n_kv_heads : model.n_heads),
      head_width_(model.d_model / model.n_heads),
      theta_(model.rope_theta) {
  const int64_t width = model.d_model;
  norm_attention_ = register_module("norm_attention", RmsNorm(width, model.norm_eps));
  q_ = register_module("q", make_linear(width, heads_ * head_width_, kInitStd));
  k_ = register_module("k", make_linear(width, kv_heads_ * head_width_, kInitStd));
  v_ = register_module("v", make_linear(width, kv_heads_ * head_width_, kInitStd));
  o_ = register_module("o", make_linear(heads_ * head_width_, width, residual_std(model)));
  norm_mlp_ = register_module("norm_mlp", RmsNorm(width, model.norm_eps));
  gate_ = register_module("gate", make_linear(width, model.d_ff, kInitStd));
  up_ = register_module("up", make_linear(width, model.d_ff, kInitStd));
  down_ = register_module("down", make_linear(model.d_ff, width, residual_std(model)));
}

torch::Tensor LlamaBlockImpl::attend(const torch::Tensor& x) {
  const int64_t batch = x.size(0);
  const int64_t length = x.size(1);
  auto heads = [&](const torch::nn::Linear& projection, int64_t count) {
    return project(projection, x).view({batch, length, count, head_width_}).transpose(1, 2);  // [B,h,T,D]
  };
  if (!cos_.defined() || cos_.size(0) != length || cos_.device() != x.device())
    std::tie(cos_, sin_) = rotary_tables(length, head_width_, theta_, x.options());
  const auto q = apply_rotary(heads(q_, heads_), cos_, sin_);
  const auto k = apply_rotary(heads(k_, kv_heads_), cos_, sin_);
  const auto mixed = causal_attention(q, k, heads(v_, kv_heads_));  // [B,H,T,D]
  return project(o_, mixed.transpose(1, 2).reshape({batch, length, heads_ * head_width_}));
}

torch::Tensor LlamaBlockImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 3, "LlamaBlock expects activations [B,T,C], got ", x.sizes());
  x = x + attend(norm_attention_(x));
  const auto h = norm_mlp_(x);
  return x + project(down_, torch::silu(project(gate_, h)) * project(up_, h));
}

LlamaHeadImpl::LlamaHeadImpl(const ModelConfig& model, const torch::Tensor& tied) {
  norm_ = register_module("norm", RmsNorm(model.d_model, model.norm_eps));
  if (tied.defined()) {
    tied_weight_ = register_parameter("tied_weight", tied);
    return;
  }
  lm_head_ = register_module("lm_head", make_linear(model.d_model, model.vocab_size, kInitStd));
}

torch::Tensor LlamaHeadImpl::forward(torch::Tensor x) {
  return linear(norm_(x), tied_weight_.defined() ? tied_weight_ : lm_head_->weight, torch::Tensor());
}

torch::nn::Sequential make_llama(const ModelConfig& model) {
  TROUPE_CHECK(model.vocab_size > 0 && model.d_model > 0 && model.n_heads > 0 && model.d_ff > 0,
               "make_llama needs a resolved model (positive sizes, d_ff set)");
  TROUPE_CHECK(model.d_model % model.n_heads == 0 && (model.d_model / model.n_heads) % 2 == 0,
               "make_llama needs an even head width");
  TROUPE_CHECK(model.n_kv_heads >= 0 && (model.n_kv_heads == 0 || model.n_heads % model.n_kv_heads == 0),
               "make_llama needs n_kv_heads dividing n_heads");
  torch::nn::Sequential layers;
  LlamaEmbedding embedding(model);
  layers->push_back("embedding", embedding);
  for (int64_t i = 0; i < model.n_layers; ++i)
    layers->push_back("block" + std::to_string(i), LlamaBlock(model));
  layers->push_back("head",
                    LlamaHead(model, model.tie_embeddings ? embedding->token_weight() : torch::Tensor()));
  return layers;
}

}  // namespace troupe
