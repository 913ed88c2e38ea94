#include "memory/zero_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace troupe {
namespace {

constexpr int64_t kFloatBytes = 4;

bool dedicated(const ZeroPlanInput& in, std::size_t parameter) {
  return parameter < in.dedicated.size() && in.dedicated[parameter];
}

Result<ZeroPlan> plan_bucketed(const ZeroPlanInput& in, const std::vector<std::size_t>& counts) {
  ZeroPlan plan;
  for (std::size_t i = counts.size(); i-- > 0;) plan.parameter_of.push_back(i);
  std::vector<std::size_t> reversed;
  std::vector<bool> alone;
  for (std::size_t i : plan.parameter_of) {
    reversed.push_back(counts[i]);
    alone.push_back(dedicated(in, i));
  }
  auto layout = FlatLayout::make_bucketed(reversed, in.policy.blocks_per_row(in.dp), in.reduce_bucket_size,
                                          FlatLayout::default_align, alone);
  if (!layout) return layout.error();
  plan.layout = std::move(*layout);
  return plan;
}

// Partitioned parameters, after the layout: the rows each layer needs, its own and its borrowed ones.
void add_borrowed_rows(const ZeroPlanInput& in, ZeroPlan& plan) {
  std::vector<std::size_t> position(plan.parameter_of.size());  // model index -> layout position
  for (std::size_t p = 0; p < plan.parameter_of.size(); ++p) position[plan.parameter_of[p]] = p;
  for (std::size_t layer = 0; layer < in.borrowed.size() && layer < plan.layer_rows.size(); ++layer)
    for (std::size_t parameter : in.borrowed[layer]) {
      std::size_t row = plan.layout.row_of_parameter(position[parameter]);
      auto& rows = plan.layer_rows[layer];
      if (!plan.persistent_rows[row] && std::find(rows.begin(), rows.end(), row) == rows.end())
        rows.push_back(row);
    }
}

Result<ZeroPlan> plan_by_layer(const ZeroPlanInput& in) {
  ZeroPlan plan;
  std::vector<std::size_t> ordered, starts;
  std::size_t index = 0;
  // The persistent row first: every small parameter of every layer.
  for (const auto& layer : in.layers)
    for (std::size_t c : layer) {
      if (c <= in.persistence_threshold && !dedicated(in, index)) {
        plan.parameter_of.push_back(index);
        ordered.push_back(c);
      }
      ++index;
    }
  bool has_persistent = !ordered.empty();
  if (has_persistent) {
    plan.persistent_rows.push_back(true);
    plan.row_layer.push_back(-1);
  }
  // Then each layer's row, and after it a row for each of its dedicated parameters.
  auto new_row = [&] {
    starts.push_back(ordered.size());
    plan.layer_rows.back().push_back(plan.persistent_rows.size());
    plan.persistent_rows.push_back(false);
    plan.row_layer.push_back(static_cast<int64_t>(plan.layer_rows.size() - 1));
  };
  index = 0;
  for (const auto& layer : in.layers) {
    plan.layer_rows.emplace_back();
    const std::size_t first = index;
    for (std::size_t c : layer) {
      if (c > in.persistence_threshold && !dedicated(in, index)) {
        if (plan.layer_rows.back().empty()) new_row();
        plan.parameter_of.push_back(index);
        ordered.push_back(c);
      }
      ++index;
    }
    for (std::size_t i = 0; i < layer.size(); ++i)
      if (dedicated(in, first + i)) {
        new_row();
        plan.parameter_of.push_back(first + i);
        ordered.push_back(layer[i]);
      }
  }
  if (!starts.empty() && starts.front() == 0) starts.erase(starts.begin());
  auto layout = FlatLayout::make(ordered, in.dp, FlatLayout::default_align, starts, in.block_align);
  if (!layout) return layout.error();
  plan.layout = std::move(*layout);
  if (plan.persistent_rows.empty()) {  // the empty model's one row
    plan.persistent_rows.push_back(false);
    plan.row_layer.push_back(-1);
  }
  add_borrowed_rows(in, plan);
  return plan;
}

// Every borrowed index names a parameter of an earlier layer.
Status check_borrowed(const ZeroPlanInput& in) {
  if (in.borrowed.empty()) return {};
  if (in.borrowed.size() != in.layers.size())
    return make_error(fmt::format("the plan's borrowed parameters cover {} layers, the model has {}",
                                  in.borrowed.size(), in.layers.size()));
  std::size_t before = 0;
  for (std::size_t layer = 0; layer < in.layers.size(); ++layer) {
    for (std::size_t parameter : in.borrowed[layer])
      if (parameter >= before)
        return make_error(
            fmt::format("layer {} borrows parameter {}, which no earlier layer holds", layer, parameter));
    before += in.layers[layer].size();
  }
  return {};
}

}  // namespace

Result<ZeroPlan> plan_zero(const ZeroPlanInput& in) {
  if (in.dp < 1) return make_error(fmt::format("ZeRO needs dp of at least 1, got {}", in.dp));
  if (in.reduce_bucket_size < 1) return make_error("ZeRO's reduce_bucket_size must be positive");
  TROUPE_TRY(check_borrowed(in));
  std::vector<std::size_t> counts;
  for (const auto& layer : in.layers) counts.insert(counts.end(), layer.begin(), layer.end());
  auto plan = in.policy.partitions_parameters() ? plan_by_layer(in) : plan_bucketed(in, counts);
  if (!plan) return plan.error();
  plan->policy = in.policy;
  for (std::size_t c : counts) plan->parameter_elements += c;
  return plan;
}

std::size_t stage3_peak_gathered(const ZeroPlan& plan, const FetchPlanner::Limits& limits) {
  const FlatLayout& layout = plan.layout;
  FetchPlanner planner(layout.row_sizes(), plan.persistent_rows, limits);
  // As the stage runs: forward gathers every row of a layer and frees them after it;
  // backward gathers them again and frees a row once its gradients are final, which for
  // a row with borrowed tensors is at its own layer (the first user, so the last in backward).
  for (int pass = 0; pass < 2; ++pass) {  // the first records, the second replays with prefetch
    planner.begin_pass();
    for (const auto& rows : plan.layer_rows) {
      for (std::size_t r : rows) planner.acquire(r);
      for (std::size_t r : rows) planner.release(r);
    }
    for (std::size_t i = plan.layer_rows.size(); i-- > 0;) {
      const auto& rows = plan.layer_rows[i];
      for (std::size_t r : rows) planner.acquire(r);
      for (std::size_t r : rows)
        if (plan.row_layer[r] == static_cast<int64_t>(i)) planner.release(r);
    }
    planner.end_pass();
  }
  return planner.peak_held_elements();
}

MemoryBytes estimate_model_state(const ZeroPlan& plan, const ModelStateInputs& in) {
  const FlatLayout& layout = plan.layout;
  const auto partition = static_cast<int64_t>(layout.partition_size());
  const auto total = static_cast<int64_t>(layout.total());
  const auto model = static_cast<int64_t>(plan.parameter_elements);
  // Gradient bucket buffers hold the largest row; stage 3's persistent row, whose
  // gradients arrive all through backward, has a buffer of its own.
  int64_t bucket = 0, persistent = 0;
  for (std::size_t k = 0; k < layout.row_count(); ++k) {
    auto size = static_cast<int64_t>(layout.row_elements(k));
    if (plan.persistent(k))
      persistent += size;
    else
      bucket = std::max(bucket, size);
  }
  MemoryBytes b;
  const int64_t item = in.element_bytes;
  const int64_t reduced = in.reduce_bytes;
  const int64_t widened = reduced != item ? reduced : 0;  // stages 0-1: the fp32 copy reduced
  // The optimizer's fp32 state per element it updates, with the master copy under mixed precision.
  const int64_t state = (in.optimizer_states_per_element + (in.master_copy ? 1 : 0)) * kFloatBytes;
  const ZeroPolicy& policy = plan.policy;
  switch (policy.parameter_home()) {
    case ParameterHome::model_tensors:
      b[MemoryKind::parameters] = model * item;
      break;
    case ParameterHome::flat:
      b[MemoryKind::parameters] = total * item;
      break;
    case ParameterHome::partition:  // plus the rows gathered at the peak
      b[MemoryKind::parameters] =
          (partition + static_cast<int64_t>(stage3_peak_gathered(plan, in.limits))) * item;
  }
  // Flat gradients of the whole model, or the partition's filled through bucket buffers
  // (and the persistent row's buffer of its own).
  if (policy.keeps_flat_gradients()) {
    b[MemoryKind::gradients] = total * (item + widened);
  } else {
    b[MemoryKind::gradients] = partition * reduced;
    b[MemoryKind::communication] = (in.bucket_buffers * bucket + persistent) * reduced;
  }
  // The optimizer's fp32 state for what this rank updates.
  b[MemoryKind::optimizer_state] = (policy.partitions_optimizer_state() ? partition : model) * state;
  return b;
}

}  // namespace troupe
