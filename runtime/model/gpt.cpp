#include "runtime/model/gpt.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "actors/model_parameters.hpp"
#include "base/check.hpp"
#include "runtime/model/attention.hpp"
#include "runtime/model/linear.hpp"

namespace troupe {
namespace {

constexpr double kInitStd = 0.02;

int64_t d_ff_of(const ModelConfig& model) {
  return model.d_ff > 0 ? model.d_ff : 4 * model.d_model;
}

// GPT-2 scales the projections that add into the residual stream so the stream's variance
// does not grow with depth: two such additions per block.
double residual_std(const ModelConfig& model) {
  return kInitStd / std::sqrt(2.0 * static_cast<double>(model.n_layers));
}

void init_linear(torch::nn::Linear& linear, double std) {
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  if (linear->bias.defined()) linear->bias.zero_();
}

void init_embedding(torch::nn::Embedding& embedding) {
  torch::NoGradGuard no_grad;
  embedding->weight.normal_(0.0, kInitStd);
}

// Applies a Linear module through linear(), which saves the weight parameter itself for
// backward (see linear.hpp) so that ZeRO stage 3 may swap its data out between passes.
// The modules stay for parameter registration and initialization.
torch::Tensor apply_linear(const torch::nn::Linear& module, const torch::Tensor& x) {
  return linear(x, module->weight, module->bias);
}

torch::nn::LayerNorm make_layer_norm(int64_t width, double eps) {
  // LayerNorm's own initialization (weight one, bias zero) is GPT-2's.
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(eps));
}

}  // namespace

GptEmbeddingImpl::GptEmbeddingImpl(const ModelConfig& model) {
  token_ = register_module("token", torch::nn::Embedding(model.vocab_size, model.d_model));
  position_ = register_module("position", torch::nn::Embedding(model.seq_len, model.d_model));
  init_embedding(token_);
  init_embedding(position_);
}

torch::Tensor GptEmbeddingImpl::forward(torch::Tensor tokens) {
  TORCH_CHECK(tokens.dim() == 2, "GptEmbedding expects tokens [B,T], got ", tokens.sizes());
  const int64_t length = tokens.size(1);
  TORCH_CHECK(length <= position_->weight.size(0), "sequence of ", length,
              " tokens is longer than the model's seq_len ", position_->weight.size(0));
  auto positions = torch::arange(length, tokens.options().dtype(torch::kLong));
  return token_(tokens) + position_(positions);  // [B,T,C] + [T,C] broadcasts over B
}

GptBlockImpl::GptBlockImpl(const ModelConfig& model)
    : n_heads_(model.n_heads), gelu_approximation_(gelu_approximation(model)) {
  const int64_t width = model.d_model;
  norm_attention_ = register_module("norm_attention", make_layer_norm(width, model.norm_eps));
  qkv_ = register_module("qkv", torch::nn::Linear(width, 3 * width));
  attention_projection_ = register_module("attention_projection", torch::nn::Linear(width, width));
  norm_mlp_ = register_module("norm_mlp", make_layer_norm(width, model.norm_eps));
  mlp_in_ = register_module("mlp_in", torch::nn::Linear(width, d_ff_of(model)));
  mlp_out_ = register_module("mlp_out", torch::nn::Linear(d_ff_of(model), width));
  init_linear(qkv_, kInitStd);
  init_linear(attention_projection_, residual_std(model));
  init_linear(mlp_in_, kInitStd);
  init_linear(mlp_out_, residual_std(model));
}

torch::Tensor GptBlockImpl::attend(const torch::Tensor& x) {
  const int64_t batch = x.size(0);
  const int64_t length = x.size(1);
  const int64_t width = x.size(2);
  const int64_t head_width = width / n_heads_;

  // [B,T,3C] -> three [B,H,T,D] tensors.
  auto qkv = apply_linear(qkv_, x).view({batch, length, 3, n_heads_, head_width}).permute({2, 0, 3, 1, 4});
  auto q = qkv[0];
  auto k = qkv[1];
  auto v = qkv[2];

  auto mixed = causal_attention(q, k, v);  // [B,H,T,D]
  return apply_linear(attention_projection_, mixed.transpose(1, 2).reshape({batch, length, width}));
}

torch::Tensor GptBlockImpl::forward(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 3, "GptBlock expects activations [B,T,C], got ", x.sizes());
  x = x + attend(norm_attention_(x));
  return x + apply_linear(mlp_out_, torch::gelu(apply_linear(mlp_in_, norm_mlp_(x)), gelu_approximation_));
}

GptHeadImpl::GptHeadImpl(const ModelConfig& model, const torch::Tensor& tied) {
  norm_ = register_module("norm", make_layer_norm(model.d_model, model.norm_eps));
  if (tied.defined()) {
    tied_weight_ = register_parameter("tied_weight", tied);
    return;
  }
  lm_head_ = register_module(
      "lm_head", torch::nn::Linear(torch::nn::LinearOptions(model.d_model, model.vocab_size).bias(false)));
  init_linear(lm_head_, kInitStd);
}

torch::Tensor GptHeadImpl::forward(torch::Tensor x) {
  if (tied_weight_.defined()) return linear(norm_(x), tied_weight_, torch::Tensor());
  return apply_linear(lm_head_, norm_(x));
}

torch::nn::Sequential make_gpt(const ModelConfig& model) {
  TROUPE_CHECK(model.vocab_size > 0 && model.seq_len > 0 && model.d_model > 0,
               "make_gpt needs positive vocab_size, seq_len and d_model");
  TROUPE_CHECK(model.n_layers >= 0 && model.n_heads > 0 && model.d_ff >= 0,
               "make_gpt needs n_layers >= 0, n_heads > 0, d_ff >= 0");
  TROUPE_CHECK(model.d_model % model.n_heads == 0, "d_model must be divisible by n_heads");

  torch::nn::Sequential layers;
  GptEmbedding embedding(model);
  layers->push_back("embedding", embedding);
  for (int64_t i = 0; i < model.n_layers; ++i) {
    layers->push_back("block" + std::to_string(i), GptBlock(model));
  }
  layers->push_back("head",
                    GptHead(model, model.tie_embeddings ? embedding->token_weight() : torch::Tensor()));
  return layers;
}

std::string gelu_approximation(const ModelConfig& model) {
  return model.activation == "gelu_tanh" ? "tanh" : "none";
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  // In fp32 whatever the model computes in (a no-op for fp32 logits), as mixed-precision
  // trainers do: a 16-bit softmax over the vocabulary loses the loss's low digits.
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32).reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& parameter : unique_parameters(module)) count += parameter.numel();
  return count;
}

torch::Tensor flatten_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> pieces;
  for (const auto& parameter : unique_parameters(module)) {
    pieces.push_back(parameter.detach().reshape({-1}).to(torch::kFloat));
  }
  if (pieces.empty()) return torch::empty({0}, torch::kFloat);
  return torch::cat(pieces);
}

}  // namespace troupe
