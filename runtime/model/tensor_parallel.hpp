// Megatron-LM's tensor-parallel layers for LibTorch, usable in a trainer's own model:
// column- and row-parallel linear layers, a vocabulary-parallel embedding and a
// vocabulary-parallel cross-entropy that never gathers the logits, with sequence
// parallelism as an option of the group. Each layer takes its shard of the weights a plain
// layer of the same shape would have (built from the full tensors, or drawn as the plain
// layer draws them from torch's generator and then sliced), so a model made of them trains
// as the plain model does, which is what the parity tests hold them to.
//
// The collectives (Megatron's f and g operators): a column-parallel layer's input is the
// identity forward and an all-reduce of its gradient backward; a row-parallel layer's
// output is an all-reduce forward and the identity backward. Under sequence parallelism
// the activations between layers hold 1/tp of the sequence, the column-parallel input is
// all-gathered along the sequence (its gradient reduce-scattered) and the row-parallel
// output reduce-scattered (its gradient all-gathered). The column-parallel backward starts
// its input gradient's collective before it computes the weight gradient and waits after,
// so the two overlap.
//
// Thread safety: as any LibTorch module: one thread runs a model at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "runtime/model/tensor_parallel_group.hpp"

namespace troupe::tp {

/// Identity forward; the gradient summed over the group backward (Megatron's f).
torch::Tensor copy_to_group(const torch::Tensor& x, const std::shared_ptr<TensorParallelGroup>& group);
/// Summed over the group forward; identity backward (Megatron's g).
torch::Tensor reduce_from_group(const torch::Tensor& x, const std::shared_ptr<TensorParallelGroup>& group);
/// [B, T/tp, ...] -> [B, T, ...], every rank's piece of the sequence in rank order; the
/// gradient is reduce-scattered back.
torch::Tensor gather_sequence(const torch::Tensor& x, const std::shared_ptr<TensorParallelGroup>& group);
/// [B, T, ...] partial sums -> [B, T/tp, ...] this rank's piece, summed over the group; the
/// gradient is all-gathered back.
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x,
                                      const std::shared_ptr<TensorParallelGroup>& group);
/// Identity forward; the gradient summed over the group: a replicated parameter used on
/// one piece of the sequence (LayerNorm under sequence parallelism) gets the whole gradient.
torch::Tensor sum_gradient(const torch::Tensor& parameter, const std::shared_ptr<TensorParallelGroup>& group);
/// This rank's piece of `x` [B, T, ...] along the sequence (no gradient exchange: what it
/// is used for is replicated, such as the model's input).
torch::Tensor sequence_piece(const torch::Tensor& x, const TensorParallelGroup& group);

/// The column-parallel product on its own (what ColumnParallelLinear runs; a head tied to a
/// VocabParallelEmbedding's weight calls it with that weight): x [.., in] (sequence
/// parallel: [B, T/tp, in]) -> [.., out/tp]; `bias` may be undefined.
torch::Tensor column_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                     const torch::Tensor& bias,
                                     const std::shared_ptr<TensorParallelGroup>& group);

/// Rank `index`'s shard of `full` as `split` lays it out, and the whole tensor back from
/// every rank's shard (in rank order).
torch::Tensor take_shard(const torch::Tensor& full, TensorSplit split, int64_t index, int64_t size);
torch::Tensor join_shards(const std::vector<torch::Tensor>& shards, TensorSplit split);

/// y = x·Wᵀ + b with W's output rows split across the group: [.., in] -> [.., out/tp]
/// (or [.., out] with gather_output). `blocks` > 1 splits each of that many equal blocks
/// of the rows (a fused q/k/v projection: 3). The weight and bias are this rank's
/// shards of `full_weight` [out, in] and `full_bias` [out] (undefined: no bias).
class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group, const torch::Tensor& full_weight,
                           const torch::Tensor& full_bias, int64_t blocks = 1, bool gather_output = false);
  /// Drawn as torch::nn::Linear(in, out) draws its weights, then sliced.
  ColumnParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group, int64_t in, int64_t out,
                           bool bias = true, bool gather_output = false);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  ///< [out/tp, in]
  torch::Tensor bias;    ///< [out/tp] or undefined

 private:
  std::shared_ptr<TensorParallelGroup> group_;
  bool gather_output_;
};
TORCH_MODULE(ColumnParallelLinear);

/// y = x·Wᵀ + b with W's input columns split: [.., in/tp] (a column-parallel layer's
/// output) -> [.., out] summed over the group (reduce-scattered along the sequence under
/// sequence parallelism). The bias is replicated and added once, after the sum.
class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group, const torch::Tensor& full_weight,
                        const torch::Tensor& full_bias);
  RowParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group, int64_t in, int64_t out,
                        bool bias = true);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  ///< [out, in/tp]
  torch::Tensor bias;    ///< [out], replicated, or undefined

 private:
  std::shared_ptr<TensorParallelGroup> group_;
};
TORCH_MODULE(RowParallelLinear);

/// An embedding whose rows (the vocabulary) are split: tokens [B, T] -> [B, T, dim],
/// each rank looking up the tokens in its range and the group summing (under sequence
/// parallelism: reduce-scattering to this rank's piece of the sequence).
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(std::shared_ptr<TensorParallelGroup> group, const torch::Tensor& full_weight);
  /// Drawn as torch::nn::Embedding(vocab, dim) draws its weight (N(0, 1)), then sliced.
  VocabParallelEmbeddingImpl(std::shared_ptr<TensorParallelGroup> group, int64_t vocab, int64_t dim);
  torch::Tensor forward(const torch::Tensor& tokens);

  torch::Tensor weight;                     ///< [vocab/tp, dim]
  int64_t first() const { return first_; }  ///< the first token this rank holds

 private:
  std::shared_ptr<TensorParallelGroup> group_;
  int64_t first_ = 0;
};
TORCH_MODULE(VocabParallelEmbedding);

/// Mean cross-entropy over every token from logits split along the vocabulary: logits
/// [.., V/tp] (rank t holding tokens [t·V/tp, (t+1)·V/tp)), targets int64 [..] -> scalar,
/// equal on every rank. One all-gather of three values per token and rank crosses the group
/// (the local row maximum, the local sum of exponentials below it and the target's logit
/// where this rank holds it); the logits never do.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           const std::shared_ptr<TensorParallelGroup>& group);

}  // namespace troupe::tp
