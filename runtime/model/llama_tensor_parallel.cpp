#include "runtime/model/llama_tensor_parallel.hpp"

#include <string>

#include <torch/torch.h>

#include "base/check.hpp"
#include "runtime/model/attention.hpp"
#include "runtime/model/linear.hpp"
#include "runtime/model/llama.hpp"
#include "runtime/model/module_parts.hpp"
#include "runtime/model/tensor_parallel.hpp"

namespace troupe {
namespace {

using Group = std::shared_ptr<TensorParallelGroup>;

// RMSNorm over a piece of the sequence: its weight's gradient is a partial sum, summed
// over the group (as the sequence-parallel LayerNorm of the GPT).
torch::Tensor rms_norm(const RmsNorm& norm, const torch::Tensor& x, const Group& group) {
  if (!group->sequence_parallel()) return norm->forward_with(x, norm->weight);
  return norm->forward_with(x, tp::sum_gradient(norm->weight, group));
}

// The whole sequence for a column-parallel product: all-gathered under sequence
// parallelism (reduce-scattered back), else the identity whose gradient the group sums.
torch::Tensor column_input(const torch::Tensor& x, const Group& group) {
  return group->sequence_parallel() ? tp::gather_sequence(x, group) : tp::copy_to_group(x, group);
}

// This rank's columns of `x`·Wᵀ for an input column_input() made.
torch::Tensor local_product(const torch::Tensor& whole, const tp::ColumnParallelLinear& layer) {
  return linear(whole, layer->weight, torch::Tensor());
}

class TpLlamaEmbeddingImpl : public torch::nn::Module {
 public:
  TpLlamaEmbeddingImpl(const torch::nn::Module& full, const Group& group) {
    token_ = register_module("token", tp::VocabParallelEmbedding(group, parameter(full, "token.weight")));
  }
  torch::Tensor forward(torch::Tensor tokens) { return token_(tokens); }
  const torch::Tensor& token_weight() const { return token_->weight; }

 private:
  tp::VocabParallelEmbedding token_{nullptr};
};
TORCH_MODULE(TpLlamaEmbedding);

class TpLlamaBlockImpl : public torch::nn::Module {
 public:
  TpLlamaBlockImpl(const torch::nn::Module& full, const ModelConfig& model, Group group)
      : group_(std::move(group)),
        heads_(model.n_heads / group_->size()),
        kv_heads_(model.n_kv_heads / group_->size()),
        head_width_(model.d_model / model.n_heads),
        theta_(model.rope_theta) {
    norm_attention_ = register_module("norm_attention", child<RmsNorm>(full, "norm_attention"));
    // In make_llama()'s order, which the parameters' order (and a checkpoint's) follows.
    q_ = column(full, "q");
    k_ = column(full, "k");
    v_ = column(full, "v");
    o_ = row(full, "o");
    norm_mlp_ = register_module("norm_mlp", child<RmsNorm>(full, "norm_mlp"));
    gate_ = column(full, "gate");
    up_ = column(full, "up");
    down_ = row(full, "down");
  }

  torch::Tensor forward(torch::Tensor x) {
    x = x + o_(attend(column_input(rms_norm(norm_attention_, x, group_), group_)));
    const auto h = column_input(rms_norm(norm_mlp_, x, group_), group_);
    return x + down_(torch::silu(local_product(h, gate_)) * local_product(h, up_));
  }

 private:
  tp::ColumnParallelLinear column(const torch::nn::Module& full, const std::string& name) {
    return register_module(
        name, tp::ColumnParallelLinear(group_, parameter(full, name + ".weight"), torch::Tensor()));
  }
  tp::RowParallelLinear row(const torch::nn::Module& full, const std::string& name) {
    return register_module(name,
                           tp::RowParallelLinear(group_, parameter(full, name + ".weight"), torch::Tensor()));
  }

  // This rank's query heads over the whole sequence: [B,T,C] -> [B,T,h·D].
  torch::Tensor attend(const torch::Tensor& x) {
    const int64_t batch = x.size(0);
    const int64_t length = x.size(1);
    auto heads = [&](const tp::ColumnParallelLinear& projection, int64_t count) {
      return local_product(x, projection).view({batch, length, count, head_width_}).transpose(1, 2);
    };
    if (!cos_.defined() || cos_.size(0) != length || cos_.device() != x.device())
      std::tie(cos_, sin_) = rotary_tables(length, head_width_, theta_, x.options());
    const auto q = apply_rotary(heads(q_, heads_), cos_, sin_);
    const auto k = apply_rotary(heads(k_, kv_heads_), cos_, sin_);
    const auto mixed = causal_attention(q, k, heads(v_, kv_heads_));
    return mixed.transpose(1, 2).reshape({batch, length, heads_ * head_width_});
  }

  Group group_;
  int64_t heads_;
  int64_t kv_heads_;
  int64_t head_width_;
  double theta_;
  torch::Tensor cos_, sin_;
  RmsNorm norm_attention_{nullptr};
  tp::ColumnParallelLinear q_{nullptr}, k_{nullptr}, v_{nullptr};
  tp::RowParallelLinear o_{nullptr};
  RmsNorm norm_mlp_{nullptr};
  tp::ColumnParallelLinear gate_{nullptr}, up_{nullptr};
  tp::RowParallelLinear down_{nullptr};
};
TORCH_MODULE(TpLlamaBlock);

class TpLlamaHeadImpl : public torch::nn::Module {
 public:
  // `tied`: the tensor-parallel embedding's token shard, which the head then uses.
  TpLlamaHeadImpl(const torch::nn::Module& full, Group group, const torch::Tensor& tied)
      : group_(std::move(group)) {
    norm_ = register_module("norm", child<RmsNorm>(full, "norm"));
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
    return tp::column_parallel_linear(rms_norm(norm_, x, group_), weight_, torch::Tensor(), group_);
  }

 private:
  Group group_;
  RmsNorm norm_{nullptr};
  tp::ColumnParallelLinear lm_head_{nullptr};
  torch::Tensor weight_;
};
TORCH_MODULE(TpLlamaHead);

}  // namespace

torch::nn::Sequential make_tensor_parallel_llama(const ModelConfig& model,
                                                 const std::shared_ptr<TensorParallelGroup>& group) {
  TROUPE_CHECK(model.n_kv_heads % group->size() == 0 && model.vocab_size % group->size() == 0,
               "a validated config splits key/value heads and vocabulary evenly");
  // The same draws as the single-process model, each rank keeping its shard.
  return split_tensor_parallel_llama(make_llama(model), model, group);
}

torch::nn::Sequential split_tensor_parallel_llama(const torch::nn::Sequential& full, const ModelConfig& model,
                                                  const std::shared_ptr<TensorParallelGroup>& group) {
  return split_layers<TpLlamaEmbedding, TpLlamaBlock, TpLlamaHead>(full, model, group);
}

}  // namespace troupe
