// The built-in GPT: a decoder-only transformer laid out as a flat sequence of layers.
//
// make_gpt() returns a torch::nn::Sequential whose children are, in order:
//   [0]            GptEmbedding  int64 tokens [B,T]  -> float activations [B,T,C]
//   [1..n_layers]  GptBlock      float [B,T,C]       -> float [B,T,C]  (pre-norm attention + MLP)
//   [n_layers + 1] GptHead       float [B,T,C]       -> float logits [B,T,vocab]
// With tie_embeddings the head's output projection is the embedding's token weight itself
// (GPT-2's tying): one tensor registered in two layers, its gradient the sum of both uses.
// Keeping the model a flat list lets the stage actor run it one layer at a time: gather a
// layer's parameters, run it, release them; or place a contiguous run of layers on a
// pipeline stage. Every layer is a plain tensor program (no dropout, no fused kernels), so
// a forward pass is a deterministic function of the weights and the input. The Linear
// modules are applied through linear() (linear.hpp), whose backward re-reads each weight
// parameter, so ZeRO stage 3 may swap a parameter's data out between forward and backward.
//
// Initialization follows GPT-2: Linear and Embedding weights ~ N(0, 0.02), biases zero,
// LayerNorm weight one / bias zero, and the two projections that write into the residual
// stream scaled by 1/sqrt(2 × n_layers). All draws come from torch's global generator in a
// fixed order, so `torch::manual_seed(seed); make_gpt(m)` yields identical weights in every
// process.
//
// Thread safety: a model is owned by one thread (the stage actor or the reference trainer);
// the free functions here only read their arguments.
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "runtime/config/config.hpp"

namespace troupe {

/// Token embedding plus learned position embedding: int64 [B,T] -> float [B,T,C], T <= seq_len.
class GptEmbeddingImpl : public torch::nn::Module {
 public:
  explicit GptEmbeddingImpl(const ModelConfig& model);
  torch::Tensor forward(torch::Tensor tokens);
  /// The token embedding [vocab, C], which a tied head uses as its output projection.
  const torch::Tensor& token_weight() const { return token_->weight; }

 private:
  torch::nn::Embedding token_{nullptr};
  torch::nn::Embedding position_{nullptr};
};
TORCH_MODULE(GptEmbedding);

/// One pre-norm transformer block: x + attention(ln1(x)), then x + mlp(ln2(x)).
/// Attention is causal multi-head self-attention with a fused q/k/v projection.
class GptBlockImpl : public torch::nn::Module {
 public:
  explicit GptBlockImpl(const ModelConfig& model);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::Tensor attend(const torch::Tensor& x);

  int64_t n_heads_;
  std::string gelu_approximation_;  // LibTorch's name: "none" (erf) or "tanh"
  torch::nn::LayerNorm norm_attention_{nullptr};
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear attention_projection_{nullptr};
  torch::nn::LayerNorm norm_mlp_{nullptr};
  torch::nn::Linear mlp_in_{nullptr};
  torch::nn::Linear mlp_out_{nullptr};
};
TORCH_MODULE(GptBlock);

/// Final LayerNorm and the bias-free LM head: float [B,T,C] -> logits [B,T,vocab]. The head
/// has a weight of its own, or, given `tied` (the token embedding's weight), registers and
/// uses that tensor.
class GptHeadImpl : public torch::nn::Module {
 public:
  explicit GptHeadImpl(const ModelConfig& model, const torch::Tensor& tied = {});
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // untied
  torch::Tensor tied_weight_;           // tied: the embedding's token weight
};
TORCH_MODULE(GptHead);

/// Builds the GPT described by `model` (see the file comment for the layer layout).
/// `model` must be valid (d_model divisible by n_heads, positive sizes); d_ff = 0 means
/// 4 × d_model. Draws all weights from torch's global generator.
torch::nn::Sequential make_gpt(const ModelConfig& model);

/// LibTorch's name of `model`'s GELU: "none" for activation = "gelu", "tanh" for "gelu_tanh".
std::string gelu_approximation(const ModelConfig& model);

/// Mean cross-entropy over every token: logits [B,T,V], targets int64 [B,T] -> scalar.
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

/// Number of scalar parameters in `module` and its children, each tensor counted once.
int64_t count_parameters(const torch::nn::Module& module);

/// All parameters of `module`, each tensor once (unique_parameters), detached, flattened and concatenated
/// into one fp32 tensor (for parity checks between trainers).
torch::Tensor flatten_parameters(const torch::nn::Module& module);

}  // namespace troupe
