#include "actors/zero/gradient_rows.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "base/check.hpp"

namespace troupe {

GradientRows::GradientRows(std::shared_ptr<ParameterStore> store, std::shared_ptr<BucketPool> pool, Post post,
                           RowDone done)
    : store_(std::move(store)), pool_(std::move(pool)), post_(std::move(post)), done_(std::move(done)) {
  const FlatLayout& layout = store_->layout();
  rows_.resize(layout.row_count());
  used_.assign(layout.parameter_count(), 0.0F);
  // Bucketed rows are laid out in backward order already; rows by layer (partitioned
  // parameters) are in forward order, then the persistent row completes last (its
  // LayerNorms span the model).
  const ZeroPlan& plan = store_->plan();
  if (!plan.policy.partitions_parameters()) {
    for (std::size_t k = 0; k < rows_.size(); ++k) order_.push_back(k);
  } else {
    for (std::size_t k = rows_.size(); k-- > 0;)
      if (!plan.persistent(k)) order_.push_back(k);
    for (std::size_t k = 0; k < rows_.size(); ++k)
      if (plan.persistent(k)) order_.push_back(k);
  }
  for (std::size_t i = 0; i < layout.parameter_count(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(store_->parameter_at(i));
    TROUPE_CHECK(accumulator != nullptr, "every parameter must require a gradient");
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list& inputs) {
          on_gradient_final(i, !inputs.empty() && inputs[0].defined());
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

std::size_t GradientRows::posts_per_step(int64_t micro_count) const {
  return rows_.size() *
         static_cast<std::size_t>(store_->policy().reduces_every_micro_batch() ? micro_count : 1);
}

void GradientRows::begin_step() {
  std::fill(used_.begin(), used_.end(), 0.0F);
  if (pool_) pool_->trim();
  // On a device, on the compute stream, before this step's backward accumulates.
  if (const auto& flat = store_->flat_gradients()) store_->memory().zero(*flat, flat->bytes());
}

void GradientRows::begin_micro(bool last) {
  last_micro_ = last;
  for (auto& r : rows_) r = Row{};
  cursor_ = 0;
}

void GradientRows::begin_split_pass(bool finishes, bool step_final) {
  split_ = SplitPass{true, finishes, step_final};
}

void GradientRows::end_split_pass() {
  TROUPE_CHECK(split_.open, "end_split_pass without begin_split_pass");
  split_.open = false;
  if (!split_.finishes) return;
  if (!store_->policy().reduces_every_micro_batch() && !split_.step_final) return;  // whole at the end
  const FlatLayout& layout = store_->layout();
  for (std::size_t k : order_) {
    Row row;
    // Partitioned gradients: whatever .grad holds goes into this micro-batch's slot, row
    // by row: its own gradients and any that a later micro-batch's input half has added
    // already (LayerNorms, embeddings). Reduction is linear, so the step's sum is the same.
    if (!store_->policy().keeps_flat_gradients())
      for (std::size_t i = 0; i < layout.row(k).parameter_count; ++i)
        take_gradient(layout.row(k).first_parameter + i, row, k);
    post(k, row);
  }
}

void GradientRows::on_gradient_final(std::size_t position, bool defined) {
  std::size_t k = store_->layout().row_of_parameter(position);
  if (split_.open) {  // gradients stay in .grad; rows are posted when a pass finishes
    if (defined) used_[position] = 1.0F;
    return;
  }
  Row& row = rows_[k];
  if (defined) used_[position] = 1.0F;
  if (!store_->policy().keeps_flat_gradients() && defined) take_gradient(position, row, k);
  const auto& layout_row = store_->layout().row(k);
  if (++row.ready < layout_row.parameter_count) return;
  row.complete = true;
  if (done_) done_(k);
  if (posts_now()) post_ready_in_order();
}

void GradientRows::post_ready_in_order() {
  while (cursor_ < order_.size() && rows_[order_[cursor_]].complete) post(order_[cursor_++]);
}

// Partitioned gradients: the gradient moves into the row's bucket slot and .grad is dropped.
void GradientRows::take_gradient(std::size_t position, Row& row, std::size_t k) {
  const FlatLayout& layout = store_->layout();
  std::size_t elements = layout.row_elements(k);
  if (!row.has_slot) {
    row.slot = pool_->acquire(k, elements);
    row.has_slot = true;
  }
  torch::Tensor& p = store_->parameter_at(position);
  if (!p.grad().defined()) return;  // nothing accumulated: the bucket keeps zeros
  torch::Tensor grad = p.grad().contiguous();
  const std::size_t at = layout.offset(position) - layout.row(k).begin;
  const std::shared_ptr<Buffer>& slot = pool_->buffer(row.slot);
  if (store_->reduce_type() != store_->dtype() || !slot->placement().on_host()) {
    // Widened on the way in (reduced in fp32), or a device's copy on the compute stream.
    store_->view(slot, at, {grad.numel()}, store_->reduce_type()).copy_(grad.reshape({-1}));
  } else {
    const std::size_t item = store_->element_size();
    std::memcpy(slot->data() + at * item, grad.data_ptr(), static_cast<std::size_t>(grad.numel()) * item);
  }
  p.mutable_grad().reset();
}

void GradientRows::flush() {
  if (!posts_now()) return;
  while (cursor_ < order_.size()) post(order_[cursor_++]);
}

void GradientRows::post(std::size_t k, Row& row) {
  TROUPE_CHECK(!row.posted, "a gradient row was posted twice in one micro-batch");
  row.posted = true;
  const FlatLayout& layout = store_->layout();
  std::size_t elements = layout.row_elements(k);
  const bool flat = store_->policy().keeps_flat_gradients();
  if (flat && store_->reduced_gradients()) {  // widened, then reduced in fp32
    const auto begin = static_cast<int64_t>(layout.row(k).begin);
    const auto n = static_cast<int64_t>(elements);
    store_->view(store_->reduced_gradients(), layout.row(k).begin, {n}, store_->reduce_type())
        .copy_(store_->view(store_->flat_gradients(), 0, {begin + n}, store_->dtype()).narrow(0, begin, n));
    post_(k, 0,
          typed_span(store_->reduced_gradients(), layout.row(k).begin, elements, store_->reduce_type()));
    return;
  }
  if (flat) {  // in host or device memory: the buffer's placement says which
    post_(k, 0, typed_span(store_->flat_gradients(), layout.row(k).begin, elements, store_->dtype()));
    return;
  }
  if (!row.has_slot) {  // no gradient reached this row: reduce zeros
    row.slot = pool_->acquire(k, elements);
    row.has_slot = true;
  }
  pool_->reducing(row.slot);
  post_(k, row.slot, typed_span(pool_->buffer(row.slot), 0, elements, store_->reduce_type()));
  pool_->posted(row.slot);
}

}  // namespace troupe
