#include "runtime/model/tensor_parallel.hpp"

#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/torch.h>

#include "runtime/model/linear.hpp"

namespace troupe::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group and the communicator forward used ride in the autograd context as integers:
// the module that made the node holds the group, the group its communicators, and a
// graph never outlives its model's step.
void keep_group(AutogradContext* ctx, const std::shared_ptr<TensorParallelGroup>& group) {
  ctx->saved_data["group"] = reinterpret_cast<int64_t>(group.get());
  ctx->saved_data["comm"] = reinterpret_cast<int64_t>(group->current_comm());
}
TensorParallelGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["group"].toInt());
}
// Backward's collectives on forward's communicator, on whichever thread autograd runs it.
TensorParallelGroup::OnThread forwards_comm(AutogradContext* ctx) {
  return TensorParallelGroup::OnThread(
      &group_of(ctx), reinterpret_cast<TensorParallelComm*>(ctx->saved_data["comm"].toInt()));
}

void check(const Status& status, const char* what) {
  if (!status.ok())
    throw std::runtime_error(fmt::format("tensor-parallel {}: {}", what, status.error().message));
}

// The group's collectives run on fp32 host buffers (TensorParallelComm): a GPU rank's
// tensors are staged through host memory and come back to the device they were on.
const torch::TensorOptions kHostF32 = torch::TensorOptions().device(torch::kCPU).dtype(torch::kFloat32);

// A fresh fp32 contiguous copy in host memory: the buffer a collective may write.
torch::Tensor fresh_f32(const torch::Tensor& x) {
  return x.to(kHostF32, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

// A collective's result as `like` was: its device and dtype.
torch::Tensor back_like(const torch::Tensor& result, const torch::Tensor& like) {
  return result.to(like.device(), like.scalar_type());
}

torch::Tensor summed(const torch::Tensor& x, TensorParallelGroup& group) {
  torch::Tensor buffer = fresh_f32(x);
  check(group.comm().all_reduce(buffer.data_ptr<float>(), static_cast<std::size_t>(buffer.numel())),
        "all-reduce");
  return back_like(buffer, x);
}

// [B, T, ...] -> [T, B, ...] in fp32 host memory, contiguous: each rank's piece of the
// sequence is then one block of the buffer.
torch::Tensor sequence_major(const torch::Tensor& x) {
  return x.transpose(0, 1).to(kHostF32).contiguous();
}
torch::Tensor batch_major(const torch::Tensor& x, const torch::Tensor& like) {
  return back_like(x.transpose(0, 1).contiguous(), like);
}

torch::Tensor gathered_sequence(const torch::Tensor& x, TensorParallelGroup& group) {
  torch::Tensor in = sequence_major(x);
  auto sizes = in.sizes().vec();
  sizes[0] *= group.size();
  torch::Tensor out = torch::empty(sizes, kHostF32);
  check(group.comm().all_gather(in.data_ptr<float>(), out.data_ptr<float>(),
                                static_cast<std::size_t>(in.numel())),
        "all-gather along the sequence");
  return batch_major(out, x);
}

torch::Tensor scattered_sequence(const torch::Tensor& x, TensorParallelGroup& group) {
  torch::Tensor in = sequence_major(x);
  TORCH_CHECK(in.size(0) % group.size() == 0, "a sequence of ", in.size(0),
              " positions does not split evenly across a tensor-parallel group of ", group.size());
  auto sizes = in.sizes().vec();
  sizes[0] /= group.size();
  torch::Tensor out = torch::empty(sizes, kHostF32);
  check(group.comm().reduce_scatter(in.data_ptr<float>(), out.data_ptr<float>(),
                                    static_cast<std::size_t>(out.numel())),
        "reduce-scatter along the sequence");
  return batch_major(out, x);
}

torch::Tensor unchanged(const torch::Tensor& x, TensorParallelGroup&) {
  return x;
}

// A column-parallel layer's gathered output: every rank's slice of the last dimension.
torch::Tensor gathered_last_dim(const torch::Tensor& x, TensorParallelGroup& group) {
  torch::Tensor in = x.movedim(-1, 0).to(kHostF32).contiguous();
  auto sizes = in.sizes().vec();
  sizes[0] *= group.size();
  torch::Tensor out = torch::empty(sizes, kHostF32);
  check(group.comm().all_gather(in.data_ptr<float>(), out.data_ptr<float>(),
                                static_cast<std::size_t>(in.numel())),
        "all-gather of the output");
  return back_like(out.movedim(0, -1).contiguous(), x);
}

torch::Tensor own_last_dim_slice(const torch::Tensor& x, TensorParallelGroup& group) {
  const int64_t piece = x.size(-1) / group.size();
  return x.narrow(-1, group.index() * piece, piece).contiguous();
}

// One of Megatron's operators over the group: `Forward` on the input, `Backward` on the
// output's gradient. Returning the input unchanged is allowed: autograd makes it a view.
using GroupOp = torch::Tensor (*)(const torch::Tensor&, TensorParallelGroup&);
template <GroupOp Forward, GroupOp Backward>
struct GroupOperator : torch::autograd::Function<GroupOperator<Forward, Backward>> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const std::shared_ptr<TensorParallelGroup>& group) {
    keep_group(ctx, group);
    return Forward(x, *group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto lane = forwards_comm(ctx);
    return {Backward(g[0], group_of(ctx)), torch::Tensor()};
  }
};

// f: identity forward, summed backward (also a replicated parameter's partial gradient).
using CopyToGroup = GroupOperator<unchanged, summed>;
using ReduceFromGroup = GroupOperator<summed, unchanged>;  // g
using GatherSequence = GroupOperator<gathered_sequence, scattered_sequence>;
using ReduceScatterSequence = GroupOperator<scattered_sequence, gathered_sequence>;
using GatherLastDim = GroupOperator<gathered_last_dim, own_last_dim_slice>;

// The column-parallel product with its input's collective inside: under sequence
// parallelism the input is all-gathered along the sequence here (and kept for the weight
// gradient). Backward starts the input gradient's all-reduce (reduce-scatter) first and
// computes the weight gradient while it runs. The weight is saved as itself, as
// linear() does, so ZeRO stage 3 may swap its data between the passes.
struct ColumnParallelFunction : torch::autograd::Function<ColumnParallelFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias,
                               const std::shared_ptr<TensorParallelGroup>& group) {
    keep_group(ctx, group);
    torch::Tensor input = group->sequence_parallel() ? gathered_sequence(x, *group) : x;
    if (bias.has_value())
      ctx->save_for_backward({input, weight, *bias});
    else
      ctx->save_for_backward({input, weight});
    ctx->saved_data["has_bias"] = bias.has_value();
    return torch::linear(input, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TensorParallelGroup& group = group_of(ctx);
    const auto lane = forwards_comm(ctx);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& grad = grad_outputs[0];
    const torch::Tensor grad_2d = grad.reshape({-1, grad.size(-1)});
    const bool sequence = group.sequence_parallel();

    torch::Tensor buffer, out;
    std::function<Status()> wait;
    if (ctx->needs_input_grad(0)) {
      torch::Tensor full = grad.matmul(weight);
      if (sequence) {
        buffer = sequence_major(full);
        auto sizes = buffer.sizes().vec();
        sizes[0] /= group.size();
        out = torch::empty(sizes, kHostF32);
        wait = group.comm().start_reduce_scatter(buffer.data_ptr<float>(), out.data_ptr<float>(),
                                                 static_cast<std::size_t>(out.numel()));
      } else {
        buffer = full.is_cpu() && full.scalar_type() == torch::kFloat32 && full.is_contiguous()
                     ? full
                     : fresh_f32(full);
        wait =
            group.comm().start_all_reduce(buffer.data_ptr<float>(), static_cast<std::size_t>(buffer.numel()));
      }
    }
    const bool needs_bias = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    auto [grad_weight, grad_bias] =  // while the input gradient's collective runs
        linear_weight_gradients(input.reshape({-1, input.size(-1)}), grad_2d,
                                ctx->needs_input_grad(1) ? weight : torch::Tensor(),
                                needs_bias ? saved[2] : torch::Tensor());
    torch::Tensor grad_x;
    if (wait) {
      check(wait(), sequence ? "reduce-scatter of an input gradient" : "all-reduce of an input gradient");
      grad_x = sequence ? batch_major(out, grad) : back_like(buffer, grad);
    }
    return {grad_x, grad_weight, grad_bias, torch::Tensor()};
  }
};

// Vocabulary-parallel cross-entropy: see the header. Saves this rank's softmax slice.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets,
                               const std::shared_ptr<TensorParallelGroup>& group) {
    const int64_t rows = logits.size(-1);
    const torch::Tensor x = logits.to(torch::kFloat32).reshape({-1, rows});
    const torch::Tensor t = targets.reshape({-1}).to(torch::kLong);
    const int64_t tokens = x.size(0);
    const torch::Tensor local_max = std::get<0>(x.max(1));
    const torch::Tensor exps = (x - local_max.unsqueeze(1)).exp();
    const torch::Tensor local = t - group->index() * rows;
    const torch::Tensor here = (local >= 0).logical_and(local < rows);
    const torch::Tensor index = local.clamp(0, rows - 1);
    const torch::Tensor target_logit = x.gather(1, index.unsqueeze(1)).squeeze(1) * here.to(torch::kFloat32);

    torch::Tensor mine =
        torch::stack({local_max, exps.sum(1), target_logit}).to(kHostF32).contiguous();  // [3, N]
    torch::Tensor gathered = torch::empty({group->size(), 3, tokens}, kHostF32);
    check(group->comm().all_gather(mine.data_ptr<float>(), gathered.data_ptr<float>(),
                                   static_cast<std::size_t>(mine.numel())),
          "all-gather of the cross-entropy's sums");
    const torch::Tensor all = gathered.to(x.device());
    const torch::Tensor maxima = all.select(1, 0);
    const torch::Tensor global_max = std::get<0>(maxima.max(0));
    const torch::Tensor total = (all.select(1, 1) * (maxima - global_max.unsqueeze(0)).exp()).sum(0);
    const torch::Tensor target = all.select(1, 2).sum(0);
    const torch::Tensor loss = (total.log() + global_max - target).mean();

    const torch::Tensor softmax = exps * ((local_max - global_max).exp() / total).unsqueeze(1);
    ctx->save_for_backward({softmax, index, here});
    ctx->saved_data["shape"] = logits.sizes().vec();
    ctx->saved_data["type"] = static_cast<int64_t>(logits.scalar_type());
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& softmax = saved[0];
    torch::Tensor grad = softmax.clone();
    grad.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(torch::kFloat32).unsqueeze(1));
    grad.mul_(grad_outputs[0].to(torch::kFloat32) / static_cast<double>(softmax.size(0)));
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const auto type = static_cast<torch::ScalarType>(ctx->saved_data["type"].toInt());
    return {grad.view(shape).to(type), torch::Tensor(), torch::Tensor()};
  }
};

c10::optional<torch::Tensor> optional(const torch::Tensor& t) {
  return t.defined() ? c10::optional<torch::Tensor>(t) : c10::nullopt;
}

void describe(TensorParallelGroup& group, const torch::Tensor& parameter, TensorSplit split) {
  group.describe(parameter.unsafeGetTensorImpl(), split);
}

}  // namespace

torch::Tensor copy_to_group(const torch::Tensor& x, const std::shared_ptr<TensorParallelGroup>& group) {
  return CopyToGroup::apply(x, group);
}
torch::Tensor reduce_from_group(const torch::Tensor& x, const std::shared_ptr<TensorParallelGroup>& group) {
  return ReduceFromGroup::apply(x, group);
}
torch::Tensor gather_sequence(const torch::Tensor& x, const std::shared_ptr<TensorParallelGroup>& group) {
  return GatherSequence::apply(x, group);
}
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x,
                                      const std::shared_ptr<TensorParallelGroup>& group) {
  return ReduceScatterSequence::apply(x, group);
}
torch::Tensor sum_gradient(const torch::Tensor& parameter,
                           const std::shared_ptr<TensorParallelGroup>& group) {
  return CopyToGroup::apply(parameter, group);
}
torch::Tensor sequence_piece(const torch::Tensor& x, const TensorParallelGroup& group) {
  const int64_t piece = x.size(1) / group.size();
  return x.narrow(1, group.index() * piece, piece);
}
torch::Tensor column_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                     const torch::Tensor& bias,
                                     const std::shared_ptr<TensorParallelGroup>& group) {
  return ColumnParallelFunction::apply(x, weight, optional(bias), group);
}
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           const std::shared_ptr<TensorParallelGroup>& group) {
  return VocabParallelCrossEntropy::apply(logits, targets, group);
}

torch::Tensor take_shard(const torch::Tensor& full, TensorSplit split, int64_t index, int64_t size) {
  if (split.replicated) return full;
  const int64_t per_block = full.size(split.dim) / split.blocks;
  TORCH_CHECK(per_block * split.blocks == full.size(split.dim) && per_block % size == 0, "dimension ",
              split.dim, " of a tensor of shape ", full.sizes(), " does not split into ", split.blocks,
              " blocks of ", size, " equal pieces");
  const int64_t piece = per_block / size;
  std::vector<torch::Tensor> pieces;
  for (int64_t b = 0; b < split.blocks; ++b)
    pieces.push_back(full.narrow(split.dim, b * per_block + index * piece, piece));
  return torch::cat(pieces, split.dim).contiguous();
}

torch::Tensor join_shards(const std::vector<torch::Tensor>& shards, TensorSplit split) {
  if (split.replicated) return shards.front();
  const int64_t piece = shards.front().size(split.dim) / split.blocks;
  std::vector<torch::Tensor> pieces;
  for (int64_t b = 0; b < split.blocks; ++b)
    for (const torch::Tensor& shard : shards) pieces.push_back(shard.narrow(split.dim, b * piece, piece));
  return torch::cat(pieces, split.dim).contiguous();
}

namespace {
torch::Tensor shard_parameter(const torch::Tensor& full, TensorSplit split,
                              const TensorParallelGroup& group) {
  torch::NoGradGuard no_grad;
  return take_shard(full.detach(), split, group.index(), group.size()).clone();
}
}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group,
                                                   const torch::Tensor& full_weight,
                                                   const torch::Tensor& full_bias, int64_t blocks,
                                                   bool gather_output)
    : group_(std::move(group)), gather_output_(gather_output) {
  const TensorSplit rows{false, 0, blocks};
  weight = register_parameter("weight", shard_parameter(full_weight, rows, *group_));
  describe(*group_, weight, rows);
  if (full_bias.defined()) {
    bias = register_parameter("bias", shard_parameter(full_bias, rows, *group_));
    describe(*group_, bias, rows);
  }
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group, int64_t in,
                                                   int64_t out, bool with_bias, bool gather_output)
    : group_(std::move(group)), gather_output_(gather_output) {
  torch::nn::Linear drawn(torch::nn::LinearOptions(in, out).bias(with_bias));
  const TensorSplit rows{false, 0, 1};
  weight = register_parameter("weight", shard_parameter(drawn->weight, rows, *group_));
  describe(*group_, weight, rows);
  if (with_bias) {
    bias = register_parameter("bias", shard_parameter(drawn->bias, rows, *group_));
    describe(*group_, bias, rows);
  }
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = column_parallel_linear(x, weight, bias, group_);
  return gather_output_ ? GatherLastDim::apply(y, group_) : y;
}

RowParallelLinearImpl::RowParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group,
                                             const torch::Tensor& full_weight, const torch::Tensor& full_bias)
    : group_(std::move(group)) {
  const TensorSplit columns{false, 1, 1};
  weight = register_parameter("weight", shard_parameter(full_weight, columns, *group_));
  describe(*group_, weight, columns);
  if (full_bias.defined()) bias = register_parameter("bias", full_bias.detach().clone());
}

RowParallelLinearImpl::RowParallelLinearImpl(std::shared_ptr<TensorParallelGroup> group, int64_t in,
                                             int64_t out, bool with_bias)
    : group_(std::move(group)) {
  torch::nn::Linear drawn(torch::nn::LinearOptions(in, out).bias(with_bias));
  const TensorSplit columns{false, 1, 1};
  weight = register_parameter("weight", shard_parameter(drawn->weight, columns, *group_));
  describe(*group_, weight, columns);
  if (with_bias) bias = register_parameter("bias", drawn->bias.detach().clone());
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  // The product without the bias (troupe's linear keeps the weight for ZeRO 3's swaps and
  // a split backward), summed over the group, then the bias once.
  torch::Tensor partial = troupe::linear(x, weight, torch::Tensor());
  torch::Tensor y = group_->sequence_parallel() ? reduce_scatter_sequence(partial, group_)
                                                : reduce_from_group(partial, group_);
  if (!bias.defined()) return y;
  return y + (group_->sequence_parallel() ? sum_gradient(bias, group_) : bias);
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(std::shared_ptr<TensorParallelGroup> group,
                                                       const torch::Tensor& full_weight)
    : group_(std::move(group)) {
  const TensorSplit rows{false, 0, 1};
  weight = register_parameter("weight", shard_parameter(full_weight, rows, *group_));
  describe(*group_, weight, rows);
  first_ = group_->index() * weight.size(0);
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(std::shared_ptr<TensorParallelGroup> group,
                                                       int64_t vocab, int64_t dim)
    : VocabParallelEmbeddingImpl(group, torch::nn::Embedding(vocab, dim)->weight) {}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& tokens) {
  const int64_t rows = weight.size(0);
  torch::Tensor local = tokens - first_;
  torch::Tensor outside = (local < 0).logical_or(local >= rows);
  torch::Tensor looked_up = torch::embedding(weight, local.masked_fill(outside, 0));
  torch::Tensor partial = looked_up.masked_fill(outside.unsqueeze(-1), 0.0);
  return group_->sequence_parallel() ? reduce_scatter_sequence(partial, group_)
                                     : reduce_from_group(partial, group_);
}

}  // namespace troupe::tp
