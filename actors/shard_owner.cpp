#include "actors/shard_owner.hpp"

#include <torch/torch.h>
#include <caf/all.hpp>

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/issuing_stream.hpp"
#include "actors/optimizer_hyper.hpp"
#include "actors/protocol/checkpoint.hpp"
#include "actors/protocol/offload.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/protocol/zero.hpp"
#include "actors/shard_copies.hpp"
#include "actors/stream.hpp"
#include "kernels/cpu/precision.hpp"
#include "kernels/cpu/reduce.hpp"
#include "kernels/stream_kernels.hpp"

namespace troupe {
namespace {

// A GPU rank's Adam/AdamW state in device memory, stepped by troupe's fused CUDA kernel.
struct DeviceAdam {
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;
  ParameterSteps steps;
  MemoryCharge charge;
};

// What LibTorch's optimizer steps: one tensor per parameter piece of the partition (a
// whole parameter in stage 0, a slice of a block otherwise), so a parameter that got no
// gradient can be skipped as LibTorch skips it, by leaving its gradient undefined.
struct TorchPieces {
  std::vector<torch::Tensor> tensors;
  std::vector<torch::Tensor> gradients;
  std::vector<std::size_t> parameter;  // by piece: its layout position
};

// A GPU rank with an offload tier: the parameters and the gradients in host memory, where
// the tier's kernels update them; shard k at offsets[k] (in values of each buffer's type:
// the device tensors'). fp32: the parameters are the master values; mixed precision: the
// 16-bit copy the pass writes (the masters are the store's, on the host).
struct HostMirror {
  std::shared_ptr<HostBuffer> parameters, gradients;
  std::vector<std::size_t> offsets;
  std::shared_ptr<ParameterStore> store;      // the device memory the copies read and write
  std::vector<std::shared_ptr<void>> pinned;  // after the buffers: unpinned before they go
};

struct ShardOwnerState {
  ShardOwnerOptions options;
  std::vector<torch::Tensor> parameters, gradients;
  std::vector<torch::Tensor> masters;           // mixed precision on a device: the fp32 values it updates
  std::vector<std::vector<ParameterRun>> runs;  // by shard: the parameters it holds
  TorchPieces pieces;                           // with LibTorch's optimizer
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  caf::actor offload;                       // with an offload tier: runs the optimizer
  std::optional<caf::actor> updating_for;   // who hears shard_updated of the pass in flight
  std::unique_ptr<DeviceAdam> device_adam;  // a GPU rank without an offload tier
  std::shared_ptr<HostMirror> mirror;       // a GPU rank with one
  std::vector<std::shared_ptr<HostBuffer>> snapshot_arrays;  // the device Adam's last checkpoint
  std::optional<caf::actor> restoring_for;  // with a mirror: who hears state_restored once it is copied in
  std::unique_ptr<Stream> stream;           // last: its thread stops before the rest goes
  static inline const char* name = "shard_owner";
};
using ShardOwner = caf::stateful_actor<ShardOwnerState>;

// Bytes of every tensor LibTorch's optimizer keeps for the partition.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
  };
  for (const auto& [key, state] : optimizer.state()) {
    (void)key;
    if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      add(a->exp_avg());
      add(a->exp_avg_sq());
      add(a->max_exp_avg_sq());
    } else if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      add(w->exp_avg());
      add(w->exp_avg_sq());
      add(w->max_exp_avg_sq());
    } else if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      add(s->momentum_buffer());
    }
  }
  return bytes;
}

// Σ g² of 16-bit gradients, widened tile by tile (in fp64 as the fp32 path).
double wide_square_sum(const torch::Tensor& g) {
  constexpr int64_t kTile = 65536;
  double sum = 0;
  for (int64_t at = 0; at < g.numel(); at += kTile) {
    torch::Tensor wide = g.narrow(0, at, std::min(kTile, g.numel() - at)).to(torch::kFloat32);
    sum += kernels::sum_squares(wide.data_ptr<float>(), static_cast<std::size_t>(wide.numel()));
  }
  return sum;
}

double square_sum(const std::vector<torch::Tensor>& gradients, const std::vector<bool>& outside) {
  double sum = 0;
  for (std::size_t k = 0; k < gradients.size(); ++k) {
    if (k < outside.size() && outside[k]) continue;
    torch::Tensor c = gradients[k].contiguous();
    sum += c.scalar_type() == torch::kFloat32
               ? kernels::sum_squares(c.data_ptr<float>(), static_cast<std::size_t>(c.numel()))
               : wide_square_sum(c.reshape({-1}));
  }
  return sum;
}

// Mixed precision: shard k's span updates its fp32 master values from its gradients (in
// the reduce type, at `gradients`) and writes the rounded result into the 16-bit copy at
// `copy16`: the model's parameters, or a GPU rank's host mirror of them.
PartitionSpan mixed_span(const ShardOwnerState& s, std::size_t k, void* gradients, void* copy16) {
  const ParameterStore& store = *s.options.store;
  PartitionSpan span;
  span.parameters = store.master_parameters()->as<float>() + store.master_offsets()[k];
  span.count = static_cast<std::size_t>(s.gradients[k].numel());
  span.row = k;
  span.runs = s.runs[k];
  if (store.reduce_type() == DataType::f32)  // reduced in fp32: the pass reads them as they are
    span.gradients = static_cast<float*>(gradients);
  else
    span.gradients16 = static_cast<uint16_t*>(gradients);
  span.copy16 = static_cast<uint16_t*>(copy16);
  span.precision = kernels::precision_of(store.dtype());
  return span;
}

// Shard k's gradients as fp32 values on the device (16-bit ones widened into a new tensor).
torch::Tensor wide(const torch::Tensor& gradients) {
  return gradients.scalar_type() == torch::kFloat32 ? gradients : gradients.to(torch::kFloat32);
}

// A GPU rank's Σ g² over its shards' gradients (in device memory) but those `outside`
// the norm, each summed on the owner's stream by troupe's fixed-order fp64 kernel and the
// shards' sums added in shard order; item() waits for that stream.
double device_square_sum(const std::vector<torch::Tensor>& gradients, const std::vector<bool>& outside,
                         void* stream) {
  if (gradients.empty()) return 0;
  auto doubles = gradients.front().options().dtype(torch::kFloat64);
  std::size_t largest = 0;
  for (const auto& g : gradients) largest = std::max(largest, static_cast<std::size_t>(g.numel()));
  auto workspace_size = std::max<std::size_t>(1, kernels::square_sum_workspace(largest, stream));
  torch::Tensor workspace = torch::empty({static_cast<int64_t>(workspace_size)}, doubles);
  torch::Tensor sums = torch::zeros({static_cast<int64_t>(gradients.size())}, doubles);
  for (std::size_t k = 0; k < gradients.size(); ++k) {
    if ((k < outside.size() && outside[k]) || gradients[k].numel() == 0) continue;
    // A widened copy goes back to LibTorch's cache, which gives it only to later work on this stream.
    const torch::Tensor g = wide(gradients[k]);
    if (Status launched =
            kernels::square_sum_on_stream(g.data_ptr<float>(), static_cast<std::size_t>(g.numel()),
                                          workspace.data_ptr<double>(), sums.data_ptr<double>() + k, stream);
        !launched)
      throw std::runtime_error(launched.error().message);
  }
  return sums.sum().item<double>();
}

// Stages 2-3: `block` (a reduced bucket slot's block of row `row`) added into the
// gradient partition, with troupe's kernel on the host or LibTorch's on the owner's stream.
void absorb(const ParameterStore& store, std::size_t row, const BufferSpan& block) {
  const std::size_t at = store.layout().row(row).partition_offset;
  const std::shared_ptr<Buffer>& partition = store.partition_gradients();
  if (partition->placement().on_host() && block.placement().on_host()) {
    kernels::add_into(partition->data() + at * element_bytes(block.type), block.data(), block.count,
                      block.type);
    return;
  }
  const auto count = static_cast<int64_t>(block.count);
  store.view(partition, at, {count}, block.type)
      .add_(store.view(block.owner, block.offset_bytes / element_bytes(block.type), {count}, block.type));
}

// Clipping: the gradients scaled in place (on the owner's stream).
void scale_gradients(std::vector<torch::Tensor>& gradients, double scale) {
  if (scale == 1.0) return;
  torch::NoGradGuard no_grad;
  for (auto& g : gradients) g.mul_(scale);
}

std::unique_ptr<DeviceAdam> make_device_adam(const std::vector<torch::Tensor>& parameters,
                                             std::size_t parameter_count,
                                             const std::shared_ptr<MemoryLedger>& ledger) {
  auto adam = std::make_unique<DeviceAdam>();
  int64_t bytes = 0;
  for (const auto& p : parameters) {
    adam->exp_avg.push_back(torch::zeros_like(p));
    adam->exp_avg_sq.push_back(torch::zeros_like(p));
    bytes += 2 * static_cast<int64_t>(p.nbytes());
  }
  adam->steps = ParameterSteps(parameter_count);
  adam->charge = MemoryCharge(ledger, MemoryKind::optimizer_state, bytes, MemorySide::device);
  return adam;
}

// The pieces of parameters a device step updates (shard k's run), by the step count each
// parameter is at: one launch per count.
using RunsByStep = std::map<int64_t, std::vector<std::pair<std::size_t, ParameterRun>>>;

// On the owner's thread: a step begins for the parameters that were used, so the stream's
// work reads counts, never advances them; an unused parameter's pieces are left alone.
RunsByStep advance_device_steps(DeviceAdam& adam, const std::vector<std::vector<ParameterRun>>& runs,
                                const ParameterUse& used) {
  adam.steps.advance(used);
  RunsByStep by_step;
  for (std::size_t k = 0; k < runs.size(); ++k)
    for (const ParameterRun& run : runs[k])
      if (is_used(used, run.parameter) && run.count > 0)
        by_step[adam.steps[run.parameter]].emplace_back(k, run);
  return by_step;
}

// The fused step, launched on `stream` (the CPU twin on a host stream).
void step_device_adam(const DeviceAdam& adam, const OptimizerRule& rule, const RunsByStep& by_step,
                      const std::vector<torch::Tensor>& parameters,
                      const std::vector<torch::Tensor>& gradients, void* stream) {
  for (const auto& [step, pieces] : by_step) {
    std::vector<kernels::AdamChunk> chunks;
    for (const auto& [k, run] : pieces) {
      kernels::AdamChunk& chunk = chunks.emplace_back();
      chunk.parameters = parameters[k].data_ptr<float>() + run.offset;
      chunk.gradients = gradients[k].data_ptr<float>() + run.offset;
      chunk.exp_avg = adam.exp_avg[k].data_ptr<float>() + run.offset;
      chunk.exp_avg_sq = adam.exp_avg_sq[k].data_ptr<float>() + run.offset;
      chunk.count = run.count;
    }
    if (Status launched = kernels::adam_on_stream(chunks, adam_params_of(rule, step), stream); !launched)
      throw std::runtime_error(launched.error().message);
  }
}

// The device's update on the owner's stream: the gradients unscaled and clipped by
// `scale` (16-bit ones widened first, so they are rounded once), the fused Adam over the
// fp32 values, and under mixed precision the 16-bit parameters rounded from the masters.
void step_on_device(ShardOwnerState& s, const OptimizerRule& rule, const RunsByStep& by_step, double scale) {
  void* stream = s.stream->native_handle();
  if (s.masters.empty()) {
    scale_gradients(s.gradients, scale);
    return step_device_adam(*s.device_adam, rule, by_step, s.parameters, s.gradients, stream);
  }
  std::vector<torch::Tensor> gradients;
  for (const auto& g : s.gradients) gradients.push_back(g.scalar_type() == torch::kFloat32 ? g : wide(g));
  scale_gradients(gradients, scale);
  step_device_adam(*s.device_adam, rule, by_step, s.masters, gradients, stream);
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < s.parameters.size(); ++k) s.parameters[k].view({-1}).copy_(s.masters[k]);
}

TorchPieces torch_pieces(const ShardOwnerState& s) {
  TorchPieces pieces;
  bool whole = s.options.store->policy().every_rank_updates_everything();
  for (std::size_t k = 0; k < s.parameters.size(); ++k)
    for (const ParameterRun& run : s.runs[k]) {
      auto offset = static_cast<int64_t>(run.offset), count = static_cast<int64_t>(run.count);
      torch::Tensor tensor = whole ? s.parameters[k] : s.parameters[k].narrow(0, offset, count);
      torch::Tensor gradient = whole ? s.gradients[k] : s.gradients[k].narrow(0, offset, count);
      tensor.mutable_grad() = gradient;
      pieces.tensors.push_back(tensor);
      pieces.gradients.push_back(gradient);
      pieces.parameter.push_back(run.parameter);
    }
  return pieces;
}

// LibTorch's optimizer over the pieces: each gets its gradient (a view of the store's) for
// the step, or none when its parameter was unused, which LibTorch skips. Afterwards every
// piece holds its view again: in stage 0 the pieces are the model's own parameters, whose
// .grad autograd must keep accumulating into the store.
void step_torch(torch::optim::Optimizer& optimizer, TorchPieces& pieces, const ParameterUse& used) {
  for (std::size_t i = 0; i < pieces.tensors.size(); ++i)
    pieces.tensors[i].mutable_grad() =
        is_used(used, pieces.parameter[i]) ? pieces.gradients[i] : torch::Tensor();
  {
    torch::NoGradGuard no_grad;
    optimizer.step();
  }
  for (std::size_t i = 0; i < pieces.tensors.size(); ++i)
    pieces.tensors[i].mutable_grad() = pieces.gradients[i];
}

std::shared_ptr<HostMirror> make_host_mirror(const ShardOwnerState& s) {
  auto mirror = std::make_shared<HostMirror>();
  std::size_t total = 0;
  for (const auto& g : s.gradients) {
    mirror->offsets.push_back(total);
    total += static_cast<std::size_t>(g.numel());
  }
  const ParameterStore& store = *s.options.store;
  const auto& ledger = store.ledger();
  mirror->parameters =
      std::make_shared<HostBuffer>(total * store.element_size(), ledger, MemoryKind::parameters);
  mirror->gradients =
      std::make_shared<HostBuffer>(total * element_bytes(store.reduce_type()), ledger, MemoryKind::gradients);
  mirror->store = s.options.store;
  if (const auto& pin = s.options.device->pin)
    for (const auto& buffer : {mirror->parameters, mirror->gradients}) {
      // Unpinned memory still copies correctly, only synchronously and slower: go on.
      if (auto pinned = pin(buffer->data(), buffer->bytes()))
        mirror->pinned.push_back(std::move(*pinned));
      else
        spdlog::warn("the host mirror of [offload] stays pageable: {}", pinned.error().message);
    }
  return mirror;
}

// The copies between the device and the host mirror, issued from the owner's host thread
// (so they keep their place after the work before it) on the d2h or h2d stream, once the
// compute stream has run what the owner issued (say, the clipping); `done` runs when they
// have (none: nobody waits, as for the first fill, which later copies on d2h follow).
enum class MirrorCopy { parameters_to_host, gradients_to_host, parameters_to_device };
void copy_mirror(ShardOwnerState& s, MirrorCopy what, std::function<void()> done = nullptr) {
  s.stream->enqueue("", [&s, what, done = std::move(done)] {
    const DeviceRank& d = *s.options.device;
    HostMirror& m = *s.mirror;
    bool to_host = what != MirrorCopy::parameters_to_device;
    bool gradients = what == MirrorCopy::gradients_to_host;
    Stream& copies = to_host ? *d.d2h : *d.h2d;
    copies.wait(d.stream->record());
    HostBuffer& host = gradients ? *m.gradients : *m.parameters;
    const std::vector<torch::Tensor>& device = gradients ? s.gradients : s.parameters;
    const char* label = gradients ? "gradients to host"
                        : to_host ? "parameters to host"
                                  : "parameters to device";
    for (std::size_t k = 0; k < device.size(); ++k) {
      void* on_device = device[k].data_ptr();
      void* on_host = host.data() + m.offsets[k] * device[k].element_size();
      copies.copy(to_host ? on_host : on_device, to_host ? on_device : on_host, device[k].nbytes(), label);
    }
    if (done) copies.record().on_complete(done);
  });
}

template <class Reply>
void reply_after(ShardOwner* self, const caf::actor& to, Reply reply) {
  auto& s = self->state;
  s.stream->notify(s.stream->record(), to, caf::make_message(std::move(reply)));
}

// With an offload tier: clip on this stream, then the manager runs the optimizer pass
// (on a GPU rank over the host mirror, after the gradients have come over).
// 16-bit gradients are scaled as the pass widens them, so they are rounded once.
void update_offloaded(ShardOwner* self, const update_shard& u) {
  auto& s = self->state;
  s.updating_for = u.reply_to;
  const bool wide_in_pass = s.options.store->reduce_type() != DataType::f32;
  if (!wide_in_pass)
    s.stream->enqueue(fmt::format("clip {}", u.step),
                      [&s, scale = u.scale] { scale_gradients(s.gradients, scale); });
  auto pass = [to = s.offload, me = caf::actor_cast<caf::actor>(self), step = u.step, used = u.used,
               hyper = u.hyper, scale = wide_in_pass ? u.scale : 1.0] {
    caf::anon_send(to, optimizer_pass{step, used, hyper, scale, me});
  };
  if (s.mirror) return copy_mirror(s, MirrorCopy::gradients_to_host, pass);
  s.stream->record().on_complete(pass);
}

// Why this owner's state cannot be checkpointed: LibTorch's optimizer keeps it.
const char* checkpoint_refusal() {
  return "checkpoints save the state of the [optimizer] that troupe's kernels run; a trainer's own "
         "optimizer factory (and SGD on a GPU rank) keeps its state inside LibTorch's optimizer, which "
         "troupe does not save";
}

// The device Adam's partition as a checkpoint's arrays: the fp32 values (the masters under
// mixed precision), exp_avg, exp_avg_sq.
std::vector<std::vector<torch::Tensor>> device_arrays(const ShardOwnerState& s) {
  return {s.masters.empty() ? s.parameters : s.masters, s.device_adam->exp_avg, s.device_adam->exp_avg_sq};
}

// A GPU rank's fused Adam: its partition copied out on the d2h stream once the owner's
// work so far (the last update) has run; the owner's later work (the next update) waits
// for the copies. Issued from the actor's thread, so both keep their place in line.
void snapshot_device(ShardOwner* self, caf::actor reply_to) {
  auto& s = self->state;
  const DeviceRank& d = *s.options.device;
  s.snapshot_arrays = shard_arrays(d, 3, shard_elements(s.parameters), std::move(s.snapshot_arrays));
  PartitionState state{s.snapshot_arrays, s.device_adam->steps.counts()};
  copy_shards(*d.d2h, s.stream->record(), ShardCopy::to_host, device_arrays(s), s.snapshot_arrays,
              [state = std::move(state), reply_to] {
                caf::anon_send(reply_to, state_snapshot{state, ""});
              });
  s.stream->wait(d.d2h->record());
}

// ... and copied back in on the h2d stream, its step counts taken on this thread.
void restore_device(ShardOwner* self, restore_state& r) {
  auto& s = self->state;
  const DeviceRank& d = *s.options.device;
  auto arrays = device_arrays(s);
  const std::size_t elements = shard_elements(s.parameters);
  const std::size_t counts = s.device_adam->steps.counts().size();
  for (const auto& array : r.state.arrays)
    if (!array || array->bytes() < elements * sizeof(float))
      return self->send(r.reply_to,
                        state_restored{fmt::format(
                            "a restored array holds fewer than this partition's {} values", elements)});
  if (r.state.arrays.size() != arrays.size() || r.state.steps.size() < counts)
    return self->send(
        r.reply_to, state_restored{fmt::format(
                        "the restored state has {} arrays and {} step counts; this partition needs {} and {}",
                        r.state.arrays.size(), r.state.steps.size(), arrays.size(), counts)});
  r.state.steps.resize(counts);
  s.device_adam->steps.restore(std::move(r.state.steps));
  copy_shards(*d.h2d, s.stream->record(), ShardCopy::to_device, arrays, r.state.arrays,
              [keep = r.state.arrays] {});
  s.stream->wait(d.h2d->record());
  if (!s.masters.empty())  // the 16-bit copy an uninterrupted run holds
    s.stream->enqueue("round restored masters", [&s] {
      torch::NoGradGuard no_grad;
      for (std::size_t k = 0; k < s.parameters.size(); ++k) s.parameters[k].view({-1}).copy_(s.masters[k]);
    });
  reply_after(self, r.reply_to, state_restored{""});
}

caf::behavior shard_owner_behavior(ShardOwner* self, ShardOwnerOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (auto& [param, grad] : s.options.store->shards()) {
    s.parameters.push_back(param);  // undefined where the row's parameters are on NVMe
    s.gradients.push_back(grad);
  }
  s.runs = s.options.store->shard_runs();
  auto on_error = [to = s.options.report_to](const std::string& what) {
    caf::anon_send(to, stage_failed{"shard owner: " + what});
  };
  if (s.options.device)
    s.stream = IssuingStream::make("optimizer", s.options.device->stream, s.options.device->scope,
                                   s.options.tracer, on_error);
  else
    s.stream = CpuStream::make("optimizer", s.options.tracer, on_error);
  s.stream->enqueue("", [threads = s.options.threads] { torch::set_num_threads(static_cast<int>(threads)); });
  // On a GPU rank, state made here belongs to the compute stream.
  std::shared_ptr<void> on_compute =
      s.options.device && s.options.device->scope ? s.options.device->scope() : nullptr;
  const bool mixed = s.options.store->dtype() != DataType::f32;
  if (s.options.offload && s.options.device) {
    s.mirror = make_host_mirror(s);
    // The mirror starts from the device's values: fp32, the master copy; mixed, the 16-bit
    // copy (the store's fp32 masters are on the host already), whose every value goes
    // back after each pass, a parameter no step used included.
    copy_mirror(s, MirrorCopy::parameters_to_host);
  }
  if (s.options.offload) {
    OffloadManagerOptions o;
    o.offload = *s.options.offload;
    o.rule = s.options.rule;
    for (std::size_t k = 0; k < s.parameters.size(); ++k) {
      if (mixed) {
        o.partition.push_back(
            s.mirror ? mixed_span(s, k,
                                  s.mirror->gradients->data() +
                                      s.mirror->offsets[k] * element_bytes(s.options.store->reduce_type()),
                                  s.mirror->parameters->data() +
                                      s.mirror->offsets[k] * s.options.store->element_size())
                     : mixed_span(s, k, s.gradients[k].data_ptr(), s.parameters[k].data_ptr()));
        continue;
      }
      const torch::Tensor& p = s.parameters[k];
      float* parameters = s.mirror      ? s.mirror->parameters->as<float>() + s.mirror->offsets[k]
                          : p.defined() ? p.data_ptr<float>()
                                        : nullptr;
      float* gradients = s.mirror ? s.mirror->gradients->as<float>() + s.mirror->offsets[k]
                                  : s.gradients[k].data_ptr<float>();
      o.partition.push_back(PartitionSpan{parameters, gradients,
                                          static_cast<std::size_t>(s.gradients[k].numel()), k, s.runs[k]});
    }
    o.partition_owner = s.mirror ? std::shared_ptr<void>(s.mirror) : std::shared_ptr<void>(s.options.store);
    o.parameter_swap = s.options.store->swap();
    o.threads = s.options.threads;
    o.tracer = s.options.tracer;
    o.ledger = s.options.store->ledger();
    s.offload = spawn_offload_manager(self->system(), std::move(o));
    self->link_to(s.offload);
  } else if (s.options.device && !s.options.make_optimizer) {
    if (mixed)  // the fp32 masters the fused Adam updates, in device memory
      for (std::size_t k = 0; k < s.gradients.size(); ++k)
        s.masters.push_back(s.options.store->master_of(k, s.gradients[k].numel()));
    s.device_adam = make_device_adam(mixed ? s.masters : s.parameters,
                                     s.options.store->layout().parameter_count(), s.options.store->ledger());
  } else {
    s.pieces = torch_pieces(s);
    s.optimizer = s.options.make_optimizer(s.pieces.tensors);
  }
  return {
      [=](begin_accumulation&) {
        auto& st = self->state;
        st.stream->enqueue("zero gradient partition", [&st] {
          if (const auto& g = st.options.store->partition_gradients())
            st.options.store->memory().zero(*g, g->bytes());
        });
      },
      [=](absorb_gradients& a) {
        auto& st = self->state;
        st.stream->enqueue(
            fmt::format("absorb row {}", a.row),
            [store = st.options.store, row = a.row, block = a.block] { absorb(*store, row, block); });
        reply_after(self, a.reply_to, gradients_absorbed{a.row, a.slot});
      },
      [=](measure_gradients& m) {
        auto& st = self->state;
        auto sum = std::make_shared<double>(0);
        st.stream->enqueue("gradient norm", [&st, sum] {
          *sum = st.options.device
                     ? device_square_sum(st.gradients, st.options.outside_norm, st.stream->native_handle())
                     : square_sum(st.gradients, st.options.outside_norm);
        });
        st.stream->record().on_complete(
            [sum, to = m.reply_to] { caf::anon_send(to, gradient_square_sum{*sum}); });
      },
      [=](update_shard& u) {
        auto& st = self->state;
        if (st.offload) return update_offloaded(self, u);
        if (st.device_adam) {
          st.stream->enqueue(fmt::format("optimizer step {}", u.step),
                             [&st, scale = u.scale, rule = st.options.rule.with(u.hyper),
                              by_step = advance_device_steps(*st.device_adam, st.runs, u.used)] {
                               step_on_device(st, rule, by_step, scale);
                             });
          return reply_after(self, u.reply_to, shard_updated{u.step});
        }
        st.stream->enqueue(fmt::format("optimizer step {}", u.step), [&st, scale = u.scale, used = u.used,
                                                                      hyper = u.hyper] {
          scale_gradients(st.gradients, scale);
          set_hyper(*st.optimizer, hyper);
          step_torch(*st.optimizer, st.pieces, used);
          st.options.store->ledger()->set(
              MemoryKind::optimizer_state, optimizer_state_bytes(*st.optimizer),
              st.options.store->memory().on_device() ? MemorySide::device : MemorySide::host);
        });
        reply_after(self, u.reply_to, shard_updated{u.step});
      },
      // Checkpoints: the offload manager copies its tiers between passes; the device Adam's
      // partition is copied on the copy streams.
      // With a host mirror the tier holds the fp32 values the device's are copied from.
      [=](snapshot_state& r) {
        auto& st = self->state;
        if (st.offload) return self->send(st.offload, std::move(r));
        if (st.device_adam) return snapshot_device(self, std::move(r.reply_to));
        self->send(r.reply_to, state_snapshot{{}, checkpoint_refusal()});
      },
      [=](restore_state& r) {
        auto& st = self->state;
        if (st.device_adam) return restore_device(self, r);
        if (!st.offload) return self->send(r.reply_to, state_restored{checkpoint_refusal()});
        if (!st.mirror) return self->send(st.offload, std::move(r));
        st.restoring_for = std::move(r.reply_to);
        r.reply_to = caf::actor_cast<caf::actor>(self);
        self->send(st.offload, std::move(r));
      },
      // The tier restored the host mirror: its values go to the device before the stage hears.
      [=](state_restored& r) {
        auto& st = self->state;
        if (!st.restoring_for) return;
        caf::actor to = std::move(*st.restoring_for);
        st.restoring_for.reset();
        if (!r.error.empty()) return self->send(to, std::move(r));
        copy_mirror(st, MirrorCopy::parameters_to_device, [to] { caf::anon_send(to, state_restored{""}); });
      },
      [=](optimizer_pass_done& d) {
        auto& st = self->state;
        if (!st.updating_for) return;
        caf::actor to = *st.updating_for;
        st.updating_for.reset();
        if (!d.error.empty())
          return self->send(st.options.report_to, stage_failed{"optimizer offload: " + d.error});
        if (!st.mirror) return self->send(to, shard_updated{d.step});
        copy_mirror(st, MirrorCopy::parameters_to_device,
                    [to, step = d.step] { caf::anon_send(to, shard_updated{step}); });
      },
  };
}

}  // namespace

caf::actor spawn_shard_owner(caf::actor_system& system, ShardOwnerOptions options) {
  return system.spawn(shard_owner_behavior, std::move(options));
}

}  // namespace troupe
