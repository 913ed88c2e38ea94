// A stage's part of a checkpoint: where its partition's pieces lie (by tensor and element
// range, so another layout can find them), a snapshot of its training state between
// steps, and a restore. The partition itself is copied by the shard owner's offload
// manager; the stage adds the model's values (ZeRO 0-2 keep every tensor whole), its
// update count and its loss scaler.
#include <utility>

#include <fmt/format.h>

#include "actors/protocol/checkpoint.hpp"
#include "actors/stage/state.hpp"
#include "kernels/cpu/precision.hpp"

namespace troupe::stage {

stage_layout describe(const StageState& s) {
  stage_layout l;
  if (!s.store) {
    l.error = s.failure.empty() ? "the stage was not built" : s.failure;
    return l;
  }
  const ParameterStore& store = *s.store;
  const FlatLayout& layout = store.layout();
  const auto& tensor_of = store.plan().parameter_of;
  l.tensor_elements.assign(layout.parameter_count(), 0);
  for (std::size_t p = 0; p < layout.parameter_count(); ++p)
    l.tensor_elements[tensor_of[p]] = layout.count(p);
  l.arrays = 1 + static_cast<std::size_t>(s.options.rule.states_per_element());
  l.held.resize(l.tensor_elements.size());
  const ZeroPolicy& policy = store.policy();
  // Partitioned parameters: only the persistent rows' tensors are held whole.
  for (std::size_t p = 0; p < layout.parameter_count(); ++p)
    l.held[tensor_of[p]] =
        !policy.partitions_parameters() || store.plan().persistent(layout.row_of_parameter(p));
  if (policy.every_rank_updates_everything()) {  // the shards are whole tensors, in tensor order
    for (std::size_t t = 0; t < l.tensor_elements.size(); ++t) {
      l.pieces.push_back(PartitionPiece{t, 0, l.tensor_elements[t], l.partition_elements});
      l.partition_elements += l.tensor_elements[t];
    }
    return l;
  }
  for (const FlatLayout::Piece& piece : layout.pieces_in(store.rank()))
    l.pieces.push_back(PartitionPiece{tensor_of[piece.parameter], piece.parameter_offset, piece.count,
                                      piece.partition_offset});
  l.partition_elements = layout.partition_size();
  return l;
}

namespace {

// Step counts travel by tensor, one for every tensor of the stage; the offload manager
// keeps them by layout position, up to the last parameter its partition holds a piece of.
std::vector<int64_t> steps_by_tensor(const StageState& s, const std::vector<int64_t>& by_position) {
  const auto& tensor_of = s.store->plan().parameter_of;
  std::vector<int64_t> out(tensor_of.size(), 0);
  for (std::size_t p = 0; p < by_position.size() && p < tensor_of.size(); ++p)
    out[tensor_of[p]] = by_position[p];
  return out;
}

std::vector<int64_t> steps_by_position(const StageState& s, const std::vector<int64_t>& by_tensor) {
  const auto& tensor_of = s.store->plan().parameter_of;
  std::vector<int64_t> out(tensor_of.size(), 0);
  for (std::size_t p = 0; p < tensor_of.size(); ++p)
    if (tensor_of[p] < by_tensor.size()) out[p] = by_tensor[tensor_of[p]];
  return out;
}

// On the compute stream: the held tensors' values from `values` (fp32, tensor after
// tensor), rounded into 16 bits by the kernel the optimizer's pass uses, so the copies are
// the ones an uninterrupted run holds.
void write_model_values(StageState& s, const HostBuffer& values, const stage_layout& l) {
  std::vector<std::size_t> offsets(l.tensor_elements.size(), 0);
  std::size_t next = 0;
  for (std::size_t t = 0; t < l.tensor_elements.size(); ++t)
    if (l.held[t]) offsets[t] = std::exchange(next, next + l.tensor_elements[t]);
  if (values.bytes() < next * sizeof(float)) throw std::runtime_error("the restored values are short");
  const auto& tensor_of = s.store->plan().parameter_of;
  torch::NoGradGuard no_grad;  // the parameters are autograd's leaves
  for (std::size_t p = 0; p < tensor_of.size(); ++p) {
    if (!l.held[tensor_of[p]]) continue;
    torch::Tensor& tensor = s.store->parameter_at(p);
    if (!tensor.is_contiguous()) throw std::runtime_error("a parameter to restore is not contiguous");
    const float* from = values.as<float>() + offsets[tensor_of[p]];
    const auto n = static_cast<std::size_t>(tensor.numel());
    if (s.store->dtype() == DataType::f32) {  // into host or device memory, on the compute stream
      tensor.view({-1}).copy_(torch::from_blob(const_cast<float*>(from), {tensor.numel()}));
    } else if (tensor.is_cpu()) {
      kernels::cast_from_f32(from, tensor.data_ptr(), n, s.store->dtype());
    } else {  // rounded on the host by the same kernel, then copied to the device
      torch::Tensor rounded = torch::empty({tensor.numel()}, tensor.options().device(torch::kCPU));
      kernels::cast_from_f32(from, rounded.data_ptr(), n, s.store->dtype());
      tensor.view({-1}).copy_(rounded);
    }
  }
}

}  // namespace

void snapshot(StageActor* self) {
  auto& s = self->state;
  auto promise = self->make_response_promise();
  if (s.failed || !s.owner || s.checkpoint_reply) {
    std::string why = s.checkpoint_reply ? "a checkpoint of this stage is already in flight" : s.failure;
    promise.deliver(stage_snapshot{{}, 0, std::nullopt, why.empty() ? "the stage was not built" : why});
    return;
  }
  s.checkpoint_reply = promise;
  self->send(s.owner, snapshot_state{caf::actor_cast<caf::actor>(self)});
}

void on_snapshot(StageActor* self, state_snapshot& got) {
  auto& s = self->state;
  if (!s.checkpoint_reply) return;
  caf::response_promise promise = std::move(*s.checkpoint_reply);
  s.checkpoint_reply.reset();
  stage_snapshot out;
  out.error = got.error;
  out.state = std::move(got.state);
  out.state.steps = steps_by_tensor(s, out.state.steps);
  out.updates_applied = s.updates_applied;
  if (s.scaler) out.scaler = s.scaler->state();
  promise.deliver(std::move(out));
}

void restore(StageActor* self, restore_stage& r) {
  auto& s = self->state;
  auto promise = self->make_response_promise();
  if (s.failed || !s.owner || s.checkpoint_reply) {
    std::string why = s.checkpoint_reply ? "a checkpoint of this stage is already in flight" : s.failure;
    promise.deliver(state_restored{why.empty() ? "the stage was not built" : why});
    return;
  }
  s.checkpoint_reply = promise;
  s.updates_applied = r.updates_applied;
  if (s.scaler && r.scaler) s.scaler->restore(*r.scaler);
  if (r.model_values)
    s.compute->enqueue("restore parameters", [&s, values = r.model_values, layout = describe(s)] {
      write_model_values(s, *values, layout);
    });
  r.state.steps = steps_by_position(s, r.state.steps);
  // The owner's copy follows the stream's: a failure on the stream arrives first as stage_failed.
  s.compute->record().on_complete(
      [owner = s.owner, request = restore_state{std::move(r.state), caf::actor_cast<caf::actor>(self)}] {
        caf::anon_send(owner, request);
      });
}

void on_restored(StageActor* self, state_restored& r) {
  auto& s = self->state;
  if (!s.checkpoint_reply) return;
  caf::response_promise promise = std::move(*s.checkpoint_reply);
  s.checkpoint_reply.reset();
  promise.deliver(state_restored{s.failed ? s.failure : r.error});
}

}  // namespace troupe::stage
