// The LLaMA family (LLaMA 2/3, Mistral-style dense models): pre-norm blocks of RMSNorm,
// grouped-query causal attention with rotary position embeddings on q and k, and a SwiGLU
// MLP, with no biases anywhere; a token embedding with no position table; a final RMSNorm
// and an LM head, tied to the embedding or not. Laid out as make_gpt()'s flat list
// (embedding, block0.., head), so every pipeline, ZeRO and offload path runs it unchanged.
//
// Each computation is Hugging Face's LlamaForCausalLM's, term for term, so that its
// checkpoints load and give the same logits: RMSNorm normalizes in fp32 and multiplies by
// its weight in the activations' dtype; rotary embeddings rotate the two halves of each
// head (rotate_half), with frequencies 1/θ^(2i/D) computed in fp32.
//
// Initialization: Linear and Embedding weights ~ N(0, 0.02), the two projections that add
// into the residual stream (attention output, MLP down) scaled by 1/sqrt(2 × n_layers) as
// GPT's, RMSNorm weights one; drawn from torch's global generator in a fixed order.
// Thread safety: as make_gpt().
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "runtime/config/config.hpp"

namespace troupe {

/// y = x / sqrt(mean(x²) + eps) · weight, normalized in fp32 (Hugging Face's LlamaRMSNorm).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t width, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  /// With `weight` in place of the registered one (sequence parallelism wraps it).
  torch::Tensor forward_with(const torch::Tensor& x, const torch::Tensor& weight) const;

  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

/// cos and sin [T, D] of the rotary embedding for positions 0..T-1 and head width D, in
/// fp32 (the halves repeated, as rotate_half expects).
std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t length, int64_t head_width, double theta,
                                                      const torch::TensorOptions& options);

/// x [B,H,T,D] rotated by position: x·cos + rotate_half(x)·sin, in x's dtype.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

/// Token embedding: int64 [B,T] -> float [B,T,C].
class LlamaEmbeddingImpl : public torch::nn::Module {
 public:
  explicit LlamaEmbeddingImpl(const ModelConfig& model);
  torch::Tensor forward(torch::Tensor tokens);
  const torch::Tensor& token_weight() const { return token_->weight; }

 private:
  torch::nn::Embedding token_{nullptr};
};
TORCH_MODULE(LlamaEmbedding);

/// x + o(attention(rope(q(n1(x))), rope(k(n1(x))), v(n1(x)))), then x + down(silu(gate(n2(x))) · up(n2(x))).
class LlamaBlockImpl : public torch::nn::Module {
 public:
  explicit LlamaBlockImpl(const ModelConfig& model);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::Tensor attend(const torch::Tensor& x);

  int64_t heads_;
  int64_t kv_heads_;
  int64_t head_width_;
  double theta_;
  torch::Tensor cos_, sin_;  // rotary tables, remade when the length or dtype changes
  RmsNorm norm_attention_{nullptr};
  torch::nn::Linear q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr};
  RmsNorm norm_mlp_{nullptr};
  torch::nn::Linear gate_{nullptr}, up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(LlamaBlock);

/// Final RMSNorm and the bias-free LM head (its own weight, or the token embedding's).
class LlamaHeadImpl : public torch::nn::Module {
 public:
  explicit LlamaHeadImpl(const ModelConfig& model, const torch::Tensor& tied = {});
  torch::Tensor forward(torch::Tensor x);

 private:
  RmsNorm norm_{nullptr};
  torch::nn::Linear lm_head_{nullptr};
  torch::Tensor tied_weight_;
};
TORCH_MODULE(LlamaHead);

/// Builds the LLaMA described by `model` (resolved: n_kv_heads and d_ff set).
torch::nn::Sequential make_llama(const ModelConfig& model);

}  // namespace troupe
