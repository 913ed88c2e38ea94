#include "actors/shard_owner.hpp"

#include <torch/torch.h>
#include <caf/all.hpp>

#include <fmt/format.h>

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
  std::unique_ptr<CpuStream> stream;  // last: its thread stops before the rest goes
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

caf::behavior shard_owner_behavior(ShardOwner* self, ShardOwnerOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (auto& [param, grad] : s.options.store->shards()) {
    s.parameters.push_back(param);
    s.gradients.push_back(grad);
    s.parameters.back().mutable_grad() = grad;
  }
  s.optimizer = s.options.make_optimizer(s.parameters);
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
        st.stream->enqueue(fmt::format("optimizer step {}", u.step), [&st, scale = u.scale] {
          torch::NoGradGuard no_grad;
          if (scale != 1.0)
            for (auto& g : st.gradients) g.mul_(scale);
          st.optimizer->step();
          st.options.store->ledger()->set(MemoryKind::optimizer_state, optimizer_state_bytes(*st.optimizer));
        });
        reply_after(self, u.reply_to, shard_updated{u.step});
      },
  };
}

}  // namespace

caf::actor spawn_shard_owner(caf::actor_system& system, ShardOwnerOptions options) {
  return system.spawn(shard_owner_behavior, std::move(options));
}

}  // namespace troupe
