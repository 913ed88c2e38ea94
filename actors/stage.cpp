#include "actors/stage.hpp"

#include <torch/torch.h>
#include <caf/all.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/model_parameters.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/protocol/zero.hpp"
#include "actors/shard_owner.hpp"
#include "actors/stream.hpp"
#include "actors/zero/gradient_rows.hpp"
#include "actors/zero/issue_queue.hpp"
#include "actors/zero/parameter_fetcher.hpp"
#include "actors/zero/sequence_check.hpp"
#include "base/check.hpp"
#include "memory/offload_plan.hpp"
#include "memory/parameter_swap.hpp"

namespace troupe {
namespace {

// Collective tags of the stage: kind in the top byte, then bucket slot, micro-batch, row.
enum class Tag : uint64_t { gradients = 1, loss, norm, parameters, fetch, memory, sequence };
uint64_t tag(Tag kind, uint64_t row = 0, uint64_t slot = 0) {
  return static_cast<uint64_t>(kind) << 56 | slot << 40 | row;
}
Tag kind_of(uint64_t t) {
  return static_cast<Tag>(t >> 56);
}
uint64_t row_of(uint64_t t) {
  return t & ((uint64_t{1} << 40) - 1);
}
uint64_t slot_of(uint64_t t) {
  return (t >> 40) & 0xffff;
}

constexpr std::size_t kMemoryFields = 4;  // parameters, gradients, optimizer state, communication

struct StepProgress {
  int64_t step = 0;
  int64_t micro_count = 1;
  std::size_t reduced = 0;  // gradient rows reduced (and absorbed)
  bool loss_reduced = false;
  ParameterUse used = nullptr;  // once the loss is reduced: the parameters any rank gave a gradient
  bool loss_ready = false, loss_issued = false;  // see reduce_loss
  bool norm_asked = false;
  double grad_norm = 0;
  std::size_t gathers_left = 0;
};

struct StageState {
  StageOptions options;
  std::shared_ptr<ParameterStore> store;
  std::shared_ptr<BucketPool> pool;
  std::unique_ptr<GradientRows> rows;
  std::unique_ptr<ParameterFetcher> fetcher;
  std::unique_ptr<LayerSequenceCheck> sequence_check;
  std::vector<torch::nn::AnyModule*> layers;
  caf::actor owner;
  std::unique_ptr<Stream> compute;  // after what its work touches: its thread stops first
  caf::actor driver;
  StepProgress progress;
  // This rank's loss of the step, then the global mean; after it, by layout position, 1
  // where the parameter got a gradient, then the mean of that over the ranks.
  std::shared_ptr<HostBuffer> loss;
  std::shared_ptr<HostBuffer> norm;    // this rank's gradient square sum, then the global one
  std::shared_ptr<HostBuffer> memory;  // every rank's peak bytes by kind (int64, gathered)
  std::vector<caf::response_promise> collecting;
  // Every collective the compute thread issues, in order (see issue_queue.hpp).
  std::shared_ptr<IssueQueue> issue = std::make_shared<IssueQueue>();
  double loss_sum = 0;  // compute thread only
  bool failed = false;
  std::string failure;  // why, once failed
  std::shared_ptr<std::atomic<bool>> stopped =
      std::make_shared<std::atomic<bool>>(false);  // compute reads it
  static inline const char* name = "stage";
};

using StageActor = caf::stateful_actor<StageState>;

void fail(StageActor* self, const std::string& error) {
  auto& s = self->state;
  if (s.failed) return;
  s.failed = true;
  s.failure = error;
  *s.stopped = true;  // micro-batches already queued on the compute stream do nothing
  if (s.pool) s.pool->fail(error);
  if (s.fetcher) s.fetcher->fail(error);
  if (s.sequence_check) s.sequence_check->fail(error);
  if (s.driver) self->send(s.driver, stage_failed{error});
}

// The layers micro-batch (step, micro) runs: the trainer's schedule, or all in order.
std::vector<int64_t> layer_sequence(const StageState& s, int64_t step, int64_t micro) {
  auto count = static_cast<int64_t>(s.layers.size());
  std::vector<int64_t> sequence;
  if (!s.options.schedule) {
    for (int64_t i = 0; i < count; ++i) sequence.push_back(i);
    return sequence;
  }
  sequence = s.options.schedule(step, micro);
  for (int64_t index : sequence)
    if (index < 0 || index >= count)
      throw std::runtime_error(
          fmt::format("the layer schedule of step {}, micro-batch {} names layer {}, but the "
                      "model has layers 0 to {}",
                      step + 1, micro, index, count - 1));
  return sequence;
}

// Runs on the compute stream: forward layer by layer (gathering each layer's
// parameters first in stage 3), loss, backward.
void forward_backward(StageState& s, const run_micro_batch& m, caf::actor self) {
  if (*s.stopped) return;  // this rank failed: issuing collectives alone would only confuse peers
  bool last = m.micro == m.micro_count - 1;
  if (m.micro == 0) {
    s.rows->begin_step();
    s.loss_sum = 0;
  }
  s.rows->begin_micro(last);
  ParameterFetcher* fetcher = s.fetcher.get();
  std::vector<int64_t> sequence = layer_sequence(s, m.step, m.micro);
  if (s.sequence_check) s.sequence_check->agree(m.step, m.micro, sequence);
  if (fetcher) fetcher->begin_pass();
  torch::Device device = s.options.device ? s.options.device->device : torch::Device(torch::kCPU);
  torch::Tensor x = m.batch->input.to(device);
  static const std::vector<std::size_t> none;
  for (int64_t index : sequence) {
    // Stage 3: the layer's own row and the rows of the tensors it borrows (tied weights).
    const auto& rows = fetcher ? s.store->plan().layer_rows[static_cast<std::size_t>(index)] : none;
    for (std::size_t row : rows) fetcher->acquire(row);
    x = s.layers[static_cast<std::size_t>(index)]->forward(x);
    for (auto row = rows.rbegin(); row != rows.rend(); ++row) x = gather_before_backward(x, fetcher, *row);
    for (std::size_t row : rows) fetcher->release(row);
  }
  torch::Tensor loss = s.options.loss(x, m.batch->target.to(device)) / static_cast<double>(m.micro_count);
  {
    // Nested in the stream's forward+backward span: what the trace test checks
    // gradient reduction against.
    Tracer::Scope span(s.options.tracer, "stream compute", "backward");
    loss.backward();
  }
  s.loss_sum += loss.item<double>();
  s.rows->flush();
  if (fetcher) fetcher->end_pass();
  if (!last) return;
  *s.loss->as<float>() = static_cast<float>(s.loss_sum);
  std::copy(s.rows->used().begin(), s.rows->used().end(), s.loss->as<float>() + 1);
  caf::anon_send(self, loss_computed{m.step});  // see reduce_loss
}

// A gradient row is ready on the compute thread: reduce it across ranks.
IssueQueue::Issue reduce_row(const StageOptions& o, caf::actor self, std::size_t row, std::size_t slot,
                             BufferSpan span, int64_t stage) {
  if (stage == 0)
    return [comm = o.comm_agent, self, row, span = std::move(span)]() mutable {
      caf::anon_send(comm, all_reduce_request{tag(Tag::gradients, row), std::move(span), ReduceOp::average,
                                              world_communicator, self});
    };
  // In place: this rank's block of the row receives the average of every rank's.
  BufferSpan mine = span;
  mine.count = span.count / static_cast<std::size_t>(o.dp);
  mine.offset_bytes += static_cast<std::size_t>(o.rank) * mine.count * sizeof(float);
  return [comm = o.comm_agent, self, row, slot, span = std::move(span), mine = std::move(mine)]() mutable {
    caf::anon_send(comm,
                   reduce_scatter_request{tag(Tag::gradients, row, slot), std::move(span), std::move(mine),
                                          ReduceOp::average, world_communicator, self});
  };
}

// A GPU rank's gradient row (stage 0): all-reduced in device memory once the kernels
// launched so far on the compute stream (the ones that made it) have run. Called where
// the row completes: on the compute thread or LibTorch's autograd thread for the device.
IssueQueue::Issue reduce_row_on_device(const DeviceRank& d, const std::shared_ptr<ParameterStore>& store,
                                       caf::actor self, std::size_t row, const BufferSpan& span) {
  device_collective_request r;
  r.tag = tag(Tag::gradients, row);
  r.kind = DeviceCollective::all_reduce;
  r.output = store->device_gradients().data_ptr<float>() + span.offset_bytes / sizeof(float);
  r.input = r.output;
  r.count = span.count;
  r.op = ReduceOp::average;
  r.ready = d.stream->record();  // the device stream itself: what has been launched
  r.keep = store;
  r.reply_to = std::move(self);
  return [to = d.collectives, r = std::move(r)]() mutable { caf::anon_send(to, std::move(r)); };
}

// [offload] param = "nvme": this rank's parameter rows go to files of the nvme tier.
Result<std::shared_ptr<ParameterSwap>> open_parameter_swap(const StageOptions& o, const ZeroPlan& plan) {
  const OffloadOptions& off = *o.offload;
  auto piece =
      parameter_piece_size(off.sub_group_size, off.host_budget_bytes, off.buffer_count,
                           static_cast<std::size_t>(o.rule.states_per_element()), off.tier == "nvme");
  if (!piece) return piece.error();
  auto store = open_nvme_store(off, o.collective_timeout_s, o.ledger, o.tracer);
  if (!store) return store.error();
  auto swap = ParameterSwap::make(std::move(*store), plan.layout, plan.persistent_rows, *piece);
  if (!swap) return make_error("[offload] nvme_path: " + swap.error().message);
  return swap;
}

bool parameters_on_nvme(const StageOptions& o) {
  return o.zero.stage == 3 && o.offload && o.offload->param_tier == "nvme";
}

// Lays out and partitions the parameters; an error (the nvme tier) fails the first step.
Status build(StageActor* self) {
  auto& s = self->state;
  const ZeroOptions& z = s.options.zero;
  // On a GPU rank, what is made here (the flat gradients, autograd's gradient accumulators,
  // which remember the stream they were made on) belongs to the compute stream.
  std::shared_ptr<void> on_compute =
      s.options.device && s.options.device->scope ? s.options.device->scope() : nullptr;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto parameters = model_parameters(s.options.model);
  if (!parameters) return parameters.error();
  ZeroPlanInput input{z.stage,
                      s.options.dp,
                      parameters->owned_counts(),
                      parameters->borrowed,
                      static_cast<std::size_t>(z.reduce_bucket_size),
                      static_cast<std::size_t>(z.persistence_threshold)};
  if (parameters_on_nvme(s.options)) input.block_align = page_block_align;
  auto plan = plan_zero(input);
  TROUPE_CHECK(plan.ok(), "a validated config gives a valid ZeRO plan");
  std::shared_ptr<ParameterSwap> swap;
  if (parameters_on_nvme(s.options)) {
    auto opened = open_parameter_swap(s.options, *plan);
    if (!opened) return opened.error();
    swap = std::move(*opened);
  }
  try {
    s.store =
        std::make_shared<ParameterStore>(std::move(*plan), std::move(parameters->tensors), s.options.rank,
                                         s.options.ledger, std::move(swap), s.options.device.has_value());
    s.loss = std::make_shared<HostBuffer>((1 + s.store->layout().parameter_count()) * sizeof(float));
  } catch (const std::exception& e) {
    return make_error(e.what());
  }
  const FlatLayout& layout = s.store->layout();
  if (z.stage >= 2) {
    std::size_t largest = 0;
    for (std::size_t k = 0; k < layout.row_count(); ++k)
      if (z.stage < 3 || !s.store->plan().persistent_rows[k])
        largest = std::max(largest, layout.row_elements(k));
    s.pool = std::make_shared<BucketPool>(z.overlap_comm, largest, s.options.ledger,
                                          s.options.collective_timeout_s, s.options.tracer);
    if (z.stage == 3)
      for (std::size_t k = 0; k < layout.row_count(); ++k)
        if (s.store->plan().persistent_rows[k]) s.pool->add_dedicated(k, layout.row_elements(k));
  }
  if (z.stage == 3) {
    s.fetcher = std::make_unique<ParameterFetcher>(
        s.store, z.limits,
        [comm = s.options.comm_agent, me](std::size_t row, BufferSpan in, BufferSpan out) {
          caf::anon_send(comm, all_gather_request{tag(Tag::fetch, row), std::move(in), std::move(out),
                                                  world_communicator, me});
        },
        s.issue, s.options.collective_timeout_s, s.options.tracer);
  }
  if (z.stage == 3) {
    std::vector<std::string> names;
    for (const auto& item : s.options.model->named_children()) names.push_back(item.key());
    s.sequence_check = std::make_unique<LayerSequenceCheck>(
        s.options.dp, s.options.rank, std::move(names),
        [comm = s.options.comm_agent, me, issue = s.issue](uint64_t id, BufferSpan in, BufferSpan out) {
          issue->issue([comm, me, id, in = std::move(in), out = std::move(out)]() mutable {
            caf::anon_send(comm, all_gather_request{tag(Tag::sequence, id), std::move(in), std::move(out),
                                                    world_communicator, me});
          });
        },
        s.options.collective_timeout_s, s.options.tracer);
  }
  ParameterFetcher* fetcher = s.fetcher.get();
  s.rows = std::make_unique<GradientRows>(
      s.store, s.pool,
      [o = s.options, me, stage = z.stage, issue = s.issue, store = s.store](
          std::size_t row, std::size_t slot, BufferSpan span) {
        issue->issue(o.device ? reduce_row_on_device(*o.device, store, me, row, span)
                              : reduce_row(o, me, row, slot, std::move(span), stage));
      },
      fetcher ? GradientRows::RowDone([fetcher](std::size_t row) { fetcher->release(row); })
              : GradientRows::RowDone());
  ShardOwnerOptions owner{
      s.store,           s.options.make_optimizer, s.options.compute_threads, s.options.tracer, me,
      s.options.offload, s.options.rule,           s.options.device};
  s.owner = spawn_shard_owner(self->system(), std::move(owner));
  self->link_to(s.owner);
  return {};
}

// The loss is reduced once the compute thread has it and every gradient row has been
// reduced, like the norm after it: a step's own collectives follow its gradients' on every
// rank, whichever way those went (staged through host memory, a GPU rank's rows reach the
// comm agent later than the compute thread issues them).
void reduce_loss(StageActor* self) {
  auto& s = self->state;
  auto& p = s.progress;
  if (p.loss_issued || !p.loss_ready || p.reduced < s.rows->posts_per_step(p.micro_count)) return;
  p.loss_issued = true;
  self->send(s.options.comm_agent,
             all_reduce_request{tag(Tag::loss), float_span(s.loss, 0, s.loss->bytes() / sizeof(float)),
                                ReduceOp::average, world_communicator, caf::actor_cast<caf::actor>(self)});
}

// Every gradient row and the loss are reduced: measure the gradients' norm.
void maybe_measure(StageActor* self) {
  auto& s = self->state;
  auto& p = s.progress;
  if (p.norm_asked || !p.loss_reduced || p.reduced < s.rows->posts_per_step(p.micro_count)) return;
  p.norm_asked = true;
  self->send(s.owner, measure_gradients{caf::actor_cast<caf::actor>(self)});
}

// One more gradient row is reduced (and, in stages 2-3, absorbed).
void on_row_reduced(StageActor* self) {
  ++self->state.progress.reduced;
  reduce_loss(self);
  maybe_measure(self);
}

void on_square_sum(StageActor* self, double sum) {
  auto& s = self->state;
  if (s.options.zero.stage == 0) {  // every rank holds every reduced gradient
    s.progress.grad_norm = std::sqrt(sum);
    self->send(s.driver, gradients_ready{s.progress.step, static_cast<double>(*s.loss->as<float>())});
    return;
  }
  *s.norm->as<float>() = static_cast<float>(sum);
  self->send(s.options.comm_agent, all_reduce_request{tag(Tag::norm), float_span(s.norm, 0, 1), ReduceOp::sum,
                                                      world_communicator, caf::actor_cast<caf::actor>(self)});
}

// After the update: exchange every rank's memory peaks, then report the step.
void exchange_memory(StageActor* self) {
  auto& s = self->state;
  MemoryBytes peak = s.options.ledger->peak();
  auto* mine = s.memory->as<int64_t>() + s.options.rank * static_cast<int64_t>(kMemoryFields);
  for (std::size_t k = 0; k < kMemoryFields; ++k) mine[k] = peak.bytes[k];
  std::size_t floats = kMemoryFields * sizeof(int64_t) / sizeof(float);  // moved as raw bytes
  BufferSpan out = float_span(s.memory, 0, floats * static_cast<std::size_t>(s.options.dp));
  BufferSpan in = float_span(s.memory, floats * static_cast<std::size_t>(s.options.rank), floats);
  self->send(s.options.comm_agent, all_gather_request{tag(Tag::memory), std::move(in), std::move(out),
                                                      world_communicator, caf::actor_cast<caf::actor>(self)});
}

void report_step(StageActor* self) {
  auto& s = self->state;
  const auto* all = s.memory->as<int64_t>();
  int64_t largest = 0;
  for (int64_t r = 0; r < s.options.dp; ++r) {
    const int64_t* b = all + r * static_cast<int64_t>(kMemoryFields);
    largest = std::max(largest, b[0] + b[1] + b[2]);
  }
  const int64_t* mine = all + s.options.rank * static_cast<int64_t>(kMemoryFields);
  self->send(s.driver, step_applied{s.progress.step, StepStats{s.progress.grad_norm, largest, mine[0],
                                                               mine[1], mine[2], mine[3]}});
}

// The shard owner updated this rank's blocks: bring every rank's into every rank.
void gather_updated(StageActor* self) {
  auto& s = self->state;
  const FlatLayout& layout = s.store->layout();
  auto& p = s.progress;
  p.gathers_left = 0;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (std::size_t k = 0; s.options.zero.stage > 0 && k < layout.row_count(); ++k) {
    const auto& row = layout.row(k);
    std::size_t size = layout.row_elements(k);
    BufferSpan in, out;
    if (s.options.zero.stage == 3) {  // only the persistent rows stay gathered
      if (!s.store->plan().persistent_rows[k]) continue;
      in = float_span(s.store->partition_parameters(), row.partition_offset, row.block);
      out = float_span(s.store->row_buffer(k), 0, size);
    } else {
      out = float_span(s.store->flat_parameters(), row.begin, size);
      in = float_span(s.store->flat_parameters(), layout.block_begin(k, s.options.rank), row.block);
    }
    ++p.gathers_left;
    self->send(s.options.comm_agent, all_gather_request{tag(Tag::parameters, k), std::move(in),
                                                        std::move(out), world_communicator, me});
  }
  if (p.gathers_left == 0) exchange_memory(self);
}

// After the loss's all-reduce: a parameter is updated when any rank gave it a gradient
// (its mean mark is above zero); null when every parameter got one, the usual case.
ParameterUse parameters_used(const HostBuffer& loss) {
  std::size_t count = loss.bytes() / sizeof(float) - 1;
  const float* marks = loss.as<float>() + 1;
  if (std::all_of(marks, marks + count, [](float m) { return m > 0; })) return nullptr;
  auto used = std::make_shared<std::vector<bool>>(count);
  for (std::size_t p = 0; p < count; ++p) (*used)[p] = marks[p] > 0;
  return used;
}

void on_collective(StageActor* self, const collective_done& done) {
  auto& s = self->state;
  if (kind_of(done.tag) == Tag::sequence) {  // the compute thread waits for it
    s.sequence_check->on_gathered(row_of(done.tag), done.error);
    return;
  }
  if (kind_of(done.tag) == Tag::fetch) {  // the compute thread waits for it
    s.fetcher->on_gathered(row_of(done.tag), done.error);
    if (!done.error.empty()) fail(self, "gathering parameters failed: " + done.error);
    return;
  }
  if (!done.error.empty()) return fail(self, "a collective of the stage failed: " + done.error);
  if (s.failed) return;
  auto& p = s.progress;
  switch (kind_of(done.tag)) {
    case Tag::gradients:
      if (s.options.zero.stage < 2) return on_row_reduced(self);
      {
        const auto& row = s.store->layout().row(row_of(done.tag));
        BufferSpan block = float_span(s.pool->buffer(slot_of(done.tag)),
                                      row.block * static_cast<std::size_t>(s.options.rank), row.block);
        self->send(s.owner, absorb_gradients{row_of(done.tag), slot_of(done.tag), std::move(block),
                                             caf::actor_cast<caf::actor>(self)});
      }
      return;
    case Tag::loss:
      p.loss_reduced = true;
      p.used = parameters_used(*s.loss);
      return maybe_measure(self);
    case Tag::norm:
      p.grad_norm = std::sqrt(std::max(0.0, static_cast<double>(*s.norm->as<float>())));
      self->send(s.driver, gradients_ready{p.step, static_cast<double>(*s.loss->as<float>())});
      return;
    case Tag::parameters:
      if (--p.gathers_left == 0) exchange_memory(self);
      return;
    case Tag::memory:
      return report_step(self);
    case Tag::fetch:
    case Tag::sequence:
      return;
  }
}

// DeepSpeed's clipping: scale by 1 / max(1, (norm + 1e-6) / clip).
double clip_scale(double norm, double clip) {
  if (clip <= 0) return 1.0;
  double factor = (norm + 1e-6) / clip;
  return factor > 1.0 ? 1.0 / factor : 1.0;
}

void collect(StageActor* self) {
  auto& s = self->state;
  s.collecting.push_back(self->make_response_promise());
  auto result = std::make_shared<parameters_collected>();
  if (!s.owner) result->error = s.failure;  // never built
  s.compute->enqueue("collect parameters", [&s, result] {
    if (!result->error.empty()) return;
    try {
      if (s.fetcher) s.fetcher->gather_all();
      torch::Tensor flat = s.store->flatten().to(torch::kCPU);
      if (s.fetcher) s.fetcher->drop_all();
      result->flat = std::make_shared<HostBuffer>(static_cast<std::size_t>(flat.numel()) * sizeof(float));
      std::memcpy(result->flat->data(), flat.data_ptr<float>(), result->flat->bytes());
    } catch (const std::exception& e) {
      result->error = e.what();
    }
  });
  s.compute->record().on_complete(
      [me = caf::actor_cast<caf::actor>(self), result] { caf::anon_send(me, std::move(*result)); });
}

caf::behavior stage_behavior(StageActor* self, StageOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto on_error = [me](const std::string& what) { caf::anon_send(me, stage_failed{what}); };
  if (s.options.device)
    s.compute = IssuingStream::make("compute", s.options.device->stream, s.options.device->scope,
                                    s.options.tracer, on_error);
  else
    s.compute = CpuStream::make("compute", s.options.tracer, on_error);
  // OpenMP's thread count is a per-thread setting: set it on the thread that computes.
  s.compute->enqueue(
      "", [threads = s.options.compute_threads] { torch::set_num_threads(static_cast<int>(threads)); });
  s.norm = std::make_shared<HostBuffer>(sizeof(float));
  s.memory =
      std::make_shared<HostBuffer>(kMemoryFields * sizeof(int64_t) * static_cast<std::size_t>(s.options.dp));
  for (auto& layer : *s.options.model) s.layers.push_back(&layer);
  if (Status built = build(self); !built) fail(self, built.error().message);
  return {
      [=](run_micro_batch& m) {
        Tracer::Scope span(self->state.options.tracer, "stage", "run_micro_batch");
        auto& st = self->state;
        st.driver = caf::actor_cast<caf::actor>(self->current_sender());
        if (!st.owner) return self->send(st.driver, stage_failed{st.failure});  // never built
        if (m.micro == 0) {
          st.progress = StepProgress{m.step, m.micro_count};
          st.options.ledger->reset_peaks();
          if (st.options.zero.stage >= 2) self->send(st.owner, begin_accumulation{});
        }
        st.compute->enqueue(fmt::format("forward+backward {}.{}", m.step, m.micro),
                            [&st, m = std::move(m), me] { forward_backward(st, m, me); });
      },
      [=](collective_done& done) {
        Tracer::Scope span(self->state.options.tracer, "stage", "collective_done");
        on_collective(self, done);
      },
      [=](gradients_absorbed& a) {
        auto& st = self->state;
        st.pool->release(a.slot);
        on_row_reduced(self);
      },
      [=](gradient_square_sum& g) { on_square_sum(self, g.sum); },
      [=](apply_step& a) {
        Tracer::Scope span(self->state.options.tracer, "stage", "apply_step");
        auto& st = self->state;
        double scale = clip_scale(st.progress.grad_norm, st.options.zero.gradient_clipping);
        self->send(st.owner,
                   update_shard{a.step, scale, st.progress.used, caf::actor_cast<caf::actor>(self)});
      },
      [=](shard_updated&) { gather_updated(self); },
      [=](collect_parameters&) { collect(self); },
      [=](parameters_collected& c) {
        auto& st = self->state;
        if (st.collecting.empty()) return;
        st.collecting.front().deliver(std::move(c));
        st.collecting.erase(st.collecting.begin());
      },
      [=](loss_computed& l) {
        auto& st = self->state;
        if (st.failed || l.step != st.progress.step) return;
        st.progress.loss_ready = true;
        reduce_loss(self);
      },
      [=](stage_failed& f) { fail(self, "compute failed: " + f.error); },
  };
}

}  // namespace

caf::actor spawn_stage(caf::actor_system& system, StageOptions options) {
  return system.spawn(stage_behavior, std::move(options));
}

}  // namespace troupe
