#include "actors/shard_owner.hpp"

#include <torch/torch.h>
#include <caf/all.hpp>

#include <fmt/format.h>

#include "actors/protocol/offload.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/protocol/zero.hpp"
#include "actors/stream.hpp"
#include "kernels/cpu/reduce.hpp"

namespace troupe {
namespace {

struct ShardOwnerState {
  ShardOwnerOptions options;
  std::vector<torch::Tensor> parameters, gradients;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  caf::actor offload;                      // with an offload tier: runs the optimizer
  std::optional<caf::actor> updating_for;  // who hears shard_updated of the pass in flight
  std::unique_ptr<CpuStream> stream;       // last: its thread stops before the rest goes
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

double square_sum(const std::vector<torch::Tensor>& gradients) {
  double sum = 0;
  for (const auto& g : gradients) {
    torch::Tensor c = g.contiguous();
    sum += kernels::sum_squares(c.data_ptr<float>(), static_cast<std::size_t>(c.numel()));
  }
  return sum;
}

template <class Reply>
void reply_after(ShardOwner* self, const caf::actor& to, Reply reply) {
  auto& s = self->state;
  s.stream->notify(s.stream->record(), to, caf::make_message(std::move(reply)));
}

// With an offload tier: clip on this stream, then the manager runs the optimizer pass.
void update_offloaded(ShardOwner* self, const update_shard& u) {
  auto& s = self->state;
  s.updating_for = u.reply_to;
  s.stream->enqueue(fmt::format("clip {}", u.step), [&s, scale = u.scale] {
    if (scale == 1.0) return;
    torch::NoGradGuard no_grad;
    for (auto& g : s.gradients) g.mul_(scale);
  });
  s.stream->record().on_complete([to = s.offload, me = caf::actor_cast<caf::actor>(self), step = u.step] {
    caf::anon_send(to, optimizer_pass{step, me});
  });
}

caf::behavior shard_owner_behavior(ShardOwner* self, ShardOwnerOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (auto& [param, grad] : s.options.store->shards()) {
    s.parameters.push_back(param);  // undefined where the row's parameters are on NVMe
    s.gradients.push_back(grad);
    if (param.defined()) s.parameters.back().mutable_grad() = grad;
  }
  if (s.options.offload) {
    OffloadManagerOptions o;
    o.offload = *s.options.offload;
    o.rule = s.options.rule;
    for (std::size_t k = 0; k < s.parameters.size(); ++k) {
      const torch::Tensor& p = s.parameters[k];
      o.partition.push_back(PartitionSpan{p.defined() ? p.data_ptr<float>() : nullptr,
                                          s.gradients[k].data_ptr<float>(),
                                          static_cast<std::size_t>(s.gradients[k].numel()), k});
    }
    o.partition_owner = s.options.store;
    o.parameter_swap = s.options.store->swap();
    o.threads = s.options.threads;
    o.tracer = s.options.tracer;
    o.ledger = s.options.store->ledger();
    s.offload = spawn_offload_manager(self->system(), std::move(o));
    self->link_to(s.offload);
  } else {
    s.optimizer = s.options.make_optimizer(s.parameters);
  }
  s.stream =
      CpuStream::make("optimizer", s.options.tracer, [to = s.options.report_to](const std::string& what) {
        caf::anon_send(to, stage_failed{"shard owner: " + what});
      });
  s.stream->enqueue("", [threads = s.options.threads] { torch::set_num_threads(static_cast<int>(threads)); });
  return {
      [=](begin_accumulation&) {
        auto& st = self->state;
        st.stream->enqueue("zero gradient partition", [&st] {
          if (auto g = st.options.store->partition_gradients()) std::memset(g->data(), 0, g->bytes());
        });
      },
      [=](absorb_gradients& a) {
        auto& st = self->state;
        const auto& row = st.options.store->layout().row(a.row);
        float* into = st.options.store->partition_gradients()->as<float>() + row.partition_offset;
        st.stream->enqueue(fmt::format("absorb row {}", a.row), [into, block = a.block] {
          kernels::add_into(into, reinterpret_cast<const float*>(block.data()), block.count, DataType::f32);
        });
        reply_after(self, a.reply_to, gradients_absorbed{a.row, a.slot});
      },
      [=](measure_gradients& m) {
        auto& st = self->state;
        auto sum = std::make_shared<double>(0);
        st.stream->enqueue("gradient norm", [&st, sum] { *sum = square_sum(st.gradients); });
        st.stream->record().on_complete(
            [sum, to = m.reply_to] { caf::anon_send(to, gradient_square_sum{*sum}); });
      },
      [=](update_shard& u) {
        auto& st = self->state;
        if (st.offload) return update_offloaded(self, u);
        st.stream->enqueue(fmt::format("optimizer step {}", u.step), [&st, scale = u.scale] {
          torch::NoGradGuard no_grad;
          if (scale != 1.0)
            for (auto& g : st.gradients) g.mul_(scale);
          st.optimizer->step();
          st.options.store->ledger()->set(MemoryKind::optimizer_state, optimizer_state_bytes(*st.optimizer));
        });
        reply_after(self, u.reply_to, shard_updated{u.step});
      },
      [=](optimizer_pass_done& d) {
        auto& st = self->state;
        if (!st.updating_for) return;
        caf::actor to = *st.updating_for;
        st.updating_for.reset();
        if (!d.error.empty())
          return self->send(st.options.report_to, stage_failed{"optimizer offload: " + d.error});
        self->send(to, shard_updated{d.step});
      },
  };
}

}  // namespace

caf::actor spawn_shard_owner(caf::actor_system& system, ShardOwnerOptions options) {
  return system.spawn(shard_owner_behavior, std::move(options));
}

}  // namespace troupe
