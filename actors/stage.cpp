#include "actors/stage.hpp"

#include <torch/torch.h>
#include <caf/all.hpp>

#include <fmt/format.h>

#include "actors/gradient_buckets.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/stream.hpp"

namespace troupe {
namespace {

struct StageState {
  StageOptions options;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<GradientBuckets> buckets;
  std::unique_ptr<CpuStream> compute;  // after what its work touches: its thread stops first
  caf::actor driver;
  int64_t step = 0;
  std::shared_ptr<HostBuffer> loss;  // this rank's loss of the step, then the global mean
  double loss_sum = 0;               // compute thread only
  std::size_t reductions_done = 0;   // actor only
  bool failed = false;
  static inline const char* name = "stage";
};

using StageActor = caf::stateful_actor<StageState>;

void fail(StageActor* self, const std::string& error) {
  if (self->state.failed) return;
  self->state.failed = true;
  self->send(self->state.driver, stage_failed{error});
}

// Runs on the compute stream: forward layer by layer, loss, backward.
void forward_backward(StageState& s, const run_micro_batch& m, caf::actor self) {
  bool last = m.micro == m.micro_count - 1;
  if (m.micro == 0) {
    s.buckets->begin_step();
    s.loss_sum = 0;
  }
  s.buckets->begin_micro(last);
  torch::Tensor x = m.batch->input;
  for (auto& layer : *s.options.model) x = layer.forward(x);
  torch::Tensor loss = s.options.loss(x, m.batch->target) / static_cast<double>(m.micro_count);
  loss.backward();
  s.loss_sum += loss.item<double>();
  if (!last) return;
  s.buckets->flush();
  *s.loss->as<float>() = static_cast<float>(s.loss_sum);
  // Collective tags of the stage: 0..buckets-1 for gradients, then one for the loss.
  caf::anon_send(s.options.comm_agent, all_reduce_request{s.buckets->bucket_count(), float_span(s.loss, 0, 1),
                                                          ReduceOp::average, world_communicator, self});
}

void on_reduced(StageActor* self, const collective_done& done) {
  auto& s = self->state;
  if (!done.error.empty()) return fail(self, "gradient reduction failed: " + done.error);
  if (++s.reductions_done < s.buckets->bucket_count() + 1) return;
  s.reductions_done = 0;
  self->send(s.driver, gradients_ready{s.step, static_cast<double>(*s.loss->as<float>())});
}

caf::behavior stage_behavior(StageActor* self, StageOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  s.compute = CpuStream::make("compute", s.options.tracer,
                              [me](const std::string& what) { caf::anon_send(me, stage_failed{what}); });
  // OpenMP's thread count is a per-thread setting: set it on the thread that computes.
  s.compute->enqueue(
      "", [threads = s.options.compute_threads] { torch::set_num_threads(static_cast<int>(threads)); });
  std::vector<torch::Tensor> parameters = s.options.model->parameters();
  s.optimizer = s.options.make_optimizer(parameters);
  s.loss = std::make_shared<HostBuffer>(sizeof(float));
  caf::actor comm = s.options.comm_agent;
  s.buckets = std::make_unique<GradientBuckets>(
      parameters, s.options.reduce_bucket_bytes, [comm, me](std::size_t index, BufferSpan span) {
        caf::anon_send(comm,
                       all_reduce_request{index, std::move(span), ReduceOp::average, world_communicator, me});
      });
  return {
      [=](run_micro_batch& m) {
        Tracer::Scope span(self->state.options.tracer, "stage", "run_micro_batch");
        auto& st = self->state;
        st.driver = caf::actor_cast<caf::actor>(self->current_sender());
        st.step = m.step;
        micro_batch_done done{m.step, m.micro, m.batch->target.numel()};
        st.compute->enqueue(fmt::format("forward+backward {}.{}", m.step, m.micro),
                            [&st, m = std::move(m), me] { forward_backward(st, m, me); });
        st.compute->notify(st.compute->record(), st.driver, caf::make_message(done));
      },
      [=](collective_done& done) {
        Tracer::Scope span(self->state.options.tracer, "stage", "collective_done");
        on_reduced(self, done);
      },
      [=](apply_step& a) {
        Tracer::Scope span(self->state.options.tracer, "stage", "apply_step");
        auto& st = self->state;
        st.compute->enqueue(fmt::format("optimizer step {}", a.step), [&st] {
          torch::NoGradGuard no_grad;
          st.optimizer->step();
        });
        st.compute->notify(st.compute->record(), st.driver, caf::make_message(step_applied{a.step}));
      },
      [=](stage_failed& f) { fail(self, "compute failed: " + f.error); },
  };
}

}  // namespace

caf::actor spawn_stage(caf::actor_system& system, StageOptions options) {
  return system.spawn(stage_behavior, std::move(options));
}

}  // namespace troupe
