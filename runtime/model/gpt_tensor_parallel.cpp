#include "runtime/model/gpt_tensor_parallel.hpp"

#include <string>

#include <torch/torch.h>

#include "base/check.hpp"
#include "runtime/model/attention.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/module_parts.hpp"
#include "runtime/model/tensor_parallel.hpp"

namespace troupe {
namespace {

using Group = std::shared_ptr<TensorParallelGroup>;

// LayerNorm over a piece of the sequence: its parameters' gradients are partial sums, so
// they are summed over the group (Megatron's sequence-parallel LayerNorm).
torch::Tensor layer_norm(torch::nn::LayerNorm norm, const torch::Tensor& x, const Group& group) {
  if (!group->sequence_parallel()) return norm(x);
  return torch::layer_norm(x, norm->options.normalized_shape(), tp::sum_gradient(norm->weight, group),
                           tp::sum_gradient(norm->bias, group), norm->options.eps());
}

class TpEmbeddingImpl : public torch::nn::Module {
 public:
  TpEmbeddingImpl(const torch::nn::Module& full, Group group) : group_(std::move(group)) {
    token_ = register_module("token", tp::VocabParallelEmbedding(group_, parameter(full, "token.weight")));
    position_ = register_module("position", child<torch::nn::Embedding>(full, "position"));
  }

  torch::Tensor forward(torch::Tensor tokens) {
    const int64_t length = tokens.size(1);
    TORCH_CHECK(length <= position_->weight.size(0), "sequence of ", length,
                " tokens is longer than the model's seq_len ", position_->weight.size(0));
    torch::Tensor x = token_(tokens);  // [B,T,C], or [B,T/tp,C] under sequence parallelism
    if (!group_->sequence_parallel())
      return x + position_(torch::arange(length, tokens.options().dtype(torch::kLong)));
    const int64_t piece = length / group_->size();
    return x + tp::sum_gradient(position_->weight, group_).narrow(0, group_->index() * piece, piece);
  }

  const torch::Tensor& token_weight() const { return token_->weight; }

 private:
  Group group_;
  tp::VocabParallelEmbedding token_{nullptr};
  torch::nn::Embedding position_{nullptr};
};
TORCH_MODULE(TpEmbedding);

class TpBlockImpl : public torch::nn::Module {
 public:
  TpBlockImpl(const torch::nn::Module& full, const ModelConfig& model, Group group)
      : group_(std::move(group)),
        heads_(model.n_heads / group_->size()),
        head_width_(model.d_model / model.n_heads),
        gelu_approximation_(gelu_approximation(model)) {
    norm_attention_ = register_module("norm_attention", child<torch::nn::LayerNorm>(full, "norm_attention"));
    qkv_ = register_module("qkv", tp::ColumnParallelLinear(group_, parameter(full, "qkv.weight"),
                                                           parameter(full, "qkv.bias"), 3));
    attention_projection_ = register_module(
        "attention_projection", tp::RowParallelLinear(group_, parameter(full, "attention_projection.weight"),
                                                      parameter(full, "attention_projection.bias")));
    norm_mlp_ = register_module("norm_mlp", child<torch::nn::LayerNorm>(full, "norm_mlp"));
    mlp_in_ = register_module("mlp_in", tp::ColumnParallelLinear(group_, parameter(full, "mlp_in.weight"),
                                                                 parameter(full, "mlp_in.bias")));
    mlp_out_ = register_module("mlp_out", tp::RowParallelLinear(group_, parameter(full, "mlp_out.weight"),
                                                                parameter(full, "mlp_out.bias")));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = x + attention_projection_(attend(qkv_(layer_norm(norm_attention_, x, group_))));
    return x + mlp_out_(torch::gelu(mlp_in_(layer_norm(norm_mlp_, x, group_)), gelu_approximation_));
  }

 private:
  // This rank's heads, as GptBlock attends all of them: [B,T,3·h·D] -> [B,T,h·D].
  torch::Tensor attend(const torch::Tensor& qkv_out) {
    const int64_t batch = qkv_out.size(0);
    const int64_t length = qkv_out.size(1);
    auto qkv = qkv_out.view({batch, length, 3, heads_, head_width_}).permute({2, 0, 3, 1, 4});
    auto mixed = causal_attention(qkv[0], qkv[1], qkv[2]);
    return mixed.transpose(1, 2).reshape({batch, length, heads_ * head_width_});
  }

  Group group_;
  int64_t heads_;
  int64_t head_width_;
  std::string gelu_approximation_;
  torch::nn::LayerNorm norm_attention_{nullptr};
  tp::ColumnParallelLinear qkv_{nullptr};
  tp::RowParallelLinear attention_projection_{nullptr};
  torch::nn::LayerNorm norm_mlp_{nullptr};
  tp::ColumnParallelLinear mlp_in_{nullptr};
  tp::RowParallelLinear mlp_out_{nullptr};
};
TORCH_MODULE(TpBlock);

class TpHeadImpl : public torch::nn::Module {
 public:
  // `tied`: the tensor-parallel embedding's token shard, which the head then uses.
  TpHeadImpl(const torch::nn::Module& full, Group group, const torch::Tensor& tied)
      : group_(std::move(group)) {
    norm_ = register_module("norm", child<torch::nn::LayerNorm>(full, "norm"));
    if (tied.defined()) {
      weight_ = register_parameter("tied_weight", tied);
      return;
    }
    lm_head_ = register_module(
        "lm_head", tp::ColumnParallelLinear(group_, parameter(full, "lm_head.weight"), torch::Tensor()));
    weight_ = lm_head_->weight;
  }

  // [B,T,C] (or this rank's piece of T) -> this rank's slice of the logits [B,T,V/tp].
  torch::Tensor forward(torch::Tensor x) {
    return tp::column_parallel_linear(layer_norm(norm_, x, group_), weight_, torch::Tensor(), group_);
  }

 private:
  Group group_;
  torch::nn::LayerNorm norm_{nullptr};
  tp::ColumnParallelLinear lm_head_{nullptr};
  torch::Tensor weight_;
};
TORCH_MODULE(TpHead);

}  // namespace

torch::nn::Sequential make_tensor_parallel_gpt(const ModelConfig& model,
                                               const std::shared_ptr<TensorParallelGroup>& group) {
  TROUPE_CHECK(model.n_heads % group->size() == 0 && model.vocab_size % group->size() == 0,
               "a validated config splits heads and vocabulary evenly");
  // The same draws as the single-process model, each rank keeping its shard.
  return split_tensor_parallel_gpt(make_gpt(model), model, group);
}

torch::nn::Sequential split_tensor_parallel_gpt(const torch::nn::Sequential& full, const ModelConfig& model,
                                                const std::shared_ptr<TensorParallelGroup>& group) {
  return split_layers<TpEmbedding, TpBlock, TpHead>(full, model, group);
}

LossFunction tensor_parallel_gpt_loss(const std::shared_ptr<TensorParallelGroup>& group) {
  return [group](const torch::Tensor& logits, const torch::Tensor& targets) {
    return tp::vocab_parallel_cross_entropy(logits, targets, group);
  };
}

}  // namespace troupe
