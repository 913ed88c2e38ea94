#include "actors/stage.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/model_parameters.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/protocol/zero.hpp"
#include "actors/shard_owner.hpp"
#include "actors/stage/state.hpp"
#include "base/check.hpp"
#include "memory/offload_plan.hpp"
#include "memory/parameter_swap.hpp"

namespace troupe::stage {

void fail(StageActor* self, const std::string& error) {
  auto& s = self->state;
  if (s.failed) return;
  s.failed = true;
  s.failure = error;
  *s.stopped = true;  // work already queued on the compute stream does nothing
  if (s.pool) s.pool->fail(error);
  if (s.fetcher) s.fetcher->fail(error);
  if (s.sequence_check) s.sequence_check->fail(error);
  if (s.flow.scheduler) self->send(s.flow.scheduler, stage_failed{error});
}

namespace {

// What the compute stream has been given so far, as an event: a GPU rank's kernels may
// still be running when a row is posted, while a CPU rank's compute thread has written it.
Event written_so_far(const StageOptions& o) {
  return o.device ? o.device->stream->record() : Event::completed();
}

// The actor that moves `span`'s memory: the comm agent for host memory, the rank's device
// collectives (NCCL, or staged through the host) for a device's.
const caf::actor& collectives_for(const StageOptions& o, const BufferSpan& span) {
  return span.placement().on_host() ? o.comm_agent : o.device->collectives;
}

// Who takes a collective that must keep its place among the device's (a ZeRO-3 layer check
// between the gathers): on a device path its collectives actor, which passes host memory on
// to the comm agent in line.
const caf::actor& in_line_with_device(const StageOptions& o) {
  return o.device ? o.device->collectives : o.comm_agent;
}

// A gradient row is ready (on the compute thread, or on LibTorch's autograd thread for a
// device): reduce it across ranks once the work that wrote it has run.
IssueQueue::Issue reduce_row(const StageOptions& o, caf::actor self, std::size_t row, std::size_t slot,
                             BufferSpan span) {
  span.ready = written_so_far(o);
  caf::actor to = collectives_for(o, span);
  if (!o.zero.policy.reduce_scatters())
    return [to, group = o.place.group, self, row, span = std::move(span)]() mutable {
      caf::anon_send(
          to, all_reduce_request{tag(Tag::gradients, row), std::move(span), ReduceOp::sum, group, self});
    };
  // In place: this rank's block of the row receives the sum of every rank's (each rank's
  // gradients are of its 1/dp share of the loss: the seed of compute.cpp's backward).
  BufferSpan mine = span;
  mine.count = span.count / static_cast<std::size_t>(o.dp);
  mine.offset_bytes += static_cast<std::size_t>(o.rank) * mine.count * element_bytes(span.type);
  return
      [to, group = o.place.group, self, row, slot, span = std::move(span), mine = std::move(mine)]() mutable {
        caf::anon_send(to, reduce_scatter_request{tag(Tag::gradients, row, slot), std::move(span),
                                                  std::move(mine), ReduceOp::sum, group, self});
      };
}

// [offload] param = "nvme": this rank's parameter rows go to files of the nvme tier.
Result<std::shared_ptr<ParameterSwap>> open_parameter_swap(const StageOptions& o, const ZeroPlan& plan) {
  const OffloadOptions& off = *o.offload;
  auto piece = parameter_piece_size(off.sub_group_size, off.host_budget_bytes, off.buffer_count,
                                    static_cast<std::size_t>(o.rule.states_per_element()), off.state_on_nvme);
  if (!piece) return piece.error();
  auto store = open_nvme_store(off, o.collective_timeout_s, o.ledger, o.tracer);
  if (!store) return store.error();
  auto swap = ParameterSwap::make(std::move(*store), plan.layout, plan.persistent_rows, *piece);
  if (!swap) return make_error("[offload] nvme_path: " + swap.error().message);
  return swap;
}

bool parameters_on_nvme(const StageOptions& o) {
  return o.zero.policy.partitions_parameters() && o.offload && o.offload->parameters_on_nvme;
}

// Where this rank holds its reduced block of each tied weight's row, and which shards the
// norm leaves out: a copy's (the owning stage counts the weight once for all of them).
void place_ties(StageState& s, std::vector<bool>& outside_norm) {
  const ParameterStore& store = *s.store;
  const FlatLayout& layout = store.layout();
  // The norm's shards: whole parameters when every rank updates everything, else rows.
  const bool whole = store.policy().every_rank_updates_everything();
  const std::size_t shards = whole ? store.plan().parameter_of.size() : layout.row_count();
  outside_norm.assign(shards, false);
  for (const TiedWeight& t : s.options.ties) {
    const auto& of = store.plan().parameter_of;
    std::size_t position =
        static_cast<std::size_t>(std::find(of.begin(), of.end(), t.parameter) - of.begin());
    std::size_t k = layout.row_of_parameter(position);
    const auto& row = layout.row(k);
    TieSlot slot{{}, position, t.comm};
    // The tie sums what the stage reduced: fp32 when gradients are reduced in fp32.
    const std::shared_ptr<Buffer> flat =
        store.reduced_gradients() ? store.reduced_gradients() : store.flat_gradients();
    const DataType type = store.reduce_type();
    if (whole)
      slot.gradient = typed_span(flat, row.begin, layout.row_elements(k), type);
    else if (store.policy().keeps_flat_gradients())
      slot.gradient = typed_span(flat, layout.block_begin(k, s.options.rank), row.block, type);
    else
      slot.gradient = typed_span(store.partition_gradients(), row.partition_offset, row.block, type);
    s.ties.push_back(std::move(slot));
    if (!t.owner) outside_norm[whole ? t.parameter : k] = true;
  }
  // A replicated parameter of a tensor-parallel group counts once, on shard 0.
  const TensorParallelPlace& tp = s.options.tensor_parallel;
  for (std::size_t p = 0; tp.shard != 0 && p < tp.replicated.size(); ++p) {
    if (!tp.replicated[p]) continue;
    const auto& of = store.plan().parameter_of;
    std::size_t position = static_cast<std::size_t>(std::find(of.begin(), of.end(), p) - of.begin());
    if (position == of.size()) continue;  // borrowed: its owner's row counts
    const std::size_t shard = whole ? p : layout.row_of_parameter(position);
    if (shard < outside_norm.size()) outside_norm[shard] = true;
  }
  s.tie_marks = std::make_shared<HostBuffer>(std::max<std::size_t>(1, s.ties.size()) * sizeof(float));
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
  ZeroPlanInput input;
  input.policy = z.policy;
  input.dp = s.options.dp;
  input.layers = parameters->owned_counts();
  input.borrowed = parameters->borrowed;
  input.reduce_bucket_size = static_cast<std::size_t>(z.reduce_bucket_size);
  input.persistence_threshold = static_cast<std::size_t>(z.persistence_threshold);
  if (parameters_on_nvme(s.options)) input.block_align = page_block_align;
  input.dedicated.assign(parameters->tensors.size(), false);
  for (const TiedWeight& t : s.options.ties) input.dedicated.at(t.parameter) = true;
  const auto& replicated = s.options.tensor_parallel.replicated;
  if (s.options.tensor_parallel.size > 1)
    for (std::size_t p = 0; p < replicated.size() && p < input.dedicated.size(); ++p)
      if (replicated[p]) input.dedicated[p] = true;
  auto plan = plan_zero(input);
  TROUPE_CHECK(plan.ok(), "a validated config gives a valid ZeRO plan");
  std::shared_ptr<ParameterSwap> swap;
  if (parameters_on_nvme(s.options)) {
    auto opened = open_parameter_swap(s.options, *plan);
    if (!opened) return opened.error();
    swap = std::move(*opened);
  }
  try {
    s.store = std::make_shared<ParameterStore>(
        std::move(*plan), std::move(parameters->tensors), s.options.rank, s.options.ledger, std::move(swap),
        s.options.device ? StoreMemory(s.options.device->memory, s.options.device->device) : StoreMemory(),
        s.options.dtype, s.options.reduce_type,
        /*masters_on_host=*/!s.options.device || s.options.offload.has_value());
    s.loss = std::make_shared<HostBuffer>((1 + s.store->layout().parameter_count()) * sizeof(float));
  } catch (const std::exception& e) {
    return make_error(e.what());
  }
  const FlatLayout& layout = s.store->layout();
  const ZeroPlan& zero_plan = s.store->plan();
  if (z.policy.reduces_every_micro_batch()) {  // through bucket buffers
    std::size_t largest = 0;
    for (std::size_t k = 0; k < layout.row_count(); ++k)
      if (!zero_plan.persistent(k)) largest = std::max(largest, layout.row_elements(k));
    s.pool = std::make_shared<BucketPool>(z.overlap_comm, largest, s.options.ledger,
                                          s.options.collective_timeout_s, s.options.tracer,
                                          element_bytes(s.store->reduce_type()), s.store->memory());
    for (std::size_t k = 0; k < layout.row_count(); ++k)
      if (zero_plan.persistent(k)) s.pool->add_dedicated(k, layout.row_elements(k));
  }
  if (z.policy.gathers_before_use()) {
    s.fetcher = std::make_unique<ParameterFetcher>(
        s.store, z.limits,
        [o = s.options, me, group = s.group()](std::size_t row, BufferSpan in, BufferSpan out) {
          caf::actor to = collectives_for(o, out);
          caf::anon_send(to,
                         all_gather_request{tag(Tag::fetch, row), std::move(in), std::move(out), group, me});
        },
        s.issue, s.options.collective_timeout_s, s.options.tracer);
    std::vector<std::string> names;
    for (const auto& item : s.options.model->named_children()) names.push_back(item.key());
    s.sequence_check = std::make_unique<LayerSequenceCheck>(
        s.options.dp, s.options.rank, std::move(names),
        [comm = in_line_with_device(s.options), me, issue = s.issue, group = s.group()](
            uint64_t id, BufferSpan in, BufferSpan out) {
          issue->issue([comm, me, id, in = std::move(in), out = std::move(out), group]() mutable {
            caf::anon_send(comm, all_gather_request{tag(Tag::sequence, id), std::move(in), std::move(out),
                                                    group, me});
          });
        },
        s.options.collective_timeout_s, s.options.tracer);
  }
  ParameterFetcher* fetcher = s.fetcher.get();
  s.rows = std::make_unique<GradientRows>(
      s.store, s.pool,
      [o = s.options, me, issue = s.issue](std::size_t row, std::size_t slot, BufferSpan span) {
        issue->issue(reduce_row(o, me, row, slot, std::move(span)));
      },
      fetcher ? GradientRows::RowDone([fetcher](std::size_t row) { fetcher->release(row); })
              : GradientRows::RowDone());
  ShardOwnerOptions owner{s.store,
                          s.options.make_optimizer,
                          s.options.compute_threads,
                          s.options.tracer,
                          me,
                          s.options.offload,
                          s.options.rule,
                          s.options.device,
                          {}};
  place_ties(s, owner.outside_norm);
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
                                ReduceOp::average, s.group(), caf::actor_cast<caf::actor>(self)});
}

// Every gradient row and the loss are reduced: each tied weight's gradients are summed
// with the other stages that hold it, with whether any of them used it (so every copy
// is updated, or none). Tie after tie, gradients then mark, in the same order on every
// stage of a tie.
void sum_ties(StageActor* self) {
  auto& s = self->state;
  auto& p = s.progress;
  if (p.ties_issued) return;
  p.ties_issued = true;
  p.ties_left = 2 * s.ties.size();
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (std::size_t t = 0; t < s.ties.size(); ++t) {
    const TieSlot& tie = s.ties[t];
    s.tie_marks->as<float>()[t] = !p.used || (*p.used)[tie.position] ? 1.0f : 0.0f;
    // Both through the actor that moves the gradient's memory, so the mark follows it.
    const caf::actor& to = collectives_for(s.options, tie.gradient);
    BufferSpan gradient = tie.gradient;
    gradient.ready = written_so_far(s.options);
    self->send(to, all_reduce_request{tag(Tag::tie, t), std::move(gradient), ReduceOp::sum, tie.comm, me});
    self->send(to, all_reduce_request{tag(Tag::tie, t, 1), float_span(s.tie_marks, t, 1), ReduceOp::sum,
                                      tie.comm, me});
  }
}

// One more sum of a tied weight is done; after the last, a weight any stage used is used.
void on_tie_summed(StageActor* self) {
  auto& s = self->state;
  auto& p = s.progress;
  if (--p.ties_left > 0 || !p.used) return;
  auto used = std::make_shared<std::vector<bool>>(*p.used);
  for (std::size_t t = 0; t < s.ties.size(); ++t)
    if (s.tie_marks->as<float>()[t] > 0) (*used)[s.ties[t].position] = true;
  p.used = std::move(used);
}

// Every gradient row and the loss are reduced, tied weights summed: measure the norm.
void maybe_measure(StageActor* self) {
  auto& s = self->state;
  auto& p = s.progress;
  if (p.norm_asked || !p.loss_reduced || p.reduced < s.rows->posts_per_step(p.micro_count)) return;
  sum_ties(self);
  if (!s.ties_summed()) return;
  p.norm_asked = true;
  self->send(s.owner, measure_gradients{caf::actor_cast<caf::actor>(self)});
}

// One more gradient row is reduced (and, in stages 2-3, absorbed).
void on_row_reduced(StageActor* self) {
  ++self->state.progress.reduced;
  reduce_loss(self);
  maybe_measure(self);
}

// One stage: the loss and the norm are known on this rank, the reduce_gradients action
// is done and the optimizer may step.
void gradients_known(StageActor* self, double loss, double square_sum, int64_t tokens, double busy_s) {
  auto& p = self->state.progress;
  p.answer = gradients_ready{p.step, loss, tokens, busy_s, square_sum};
  p.answer_ready = true;
  // Not std::max(0.0, ·), which turns a NaN into 0: an overflow must stay visible.
  p.grad_norm = square_sum < 0 ? 0.0 : std::sqrt(square_sum);
  p.norm_known = true;
  answer_gradients_ready(self);
  pump(self);  // an optimizer_step waiting for the norm
}

// A pipeline: the scheduler summed every rank's shares; the optimizer may step.
void on_gradients_summed(StageActor* self, const gradients_summed& g) {
  auto& p = self->state.progress;
  if (self->state.failed || g.step != p.step) return;
  p.grad_norm = g.grad_norm;
  p.norm_known = true;
  pump(self);
}

// In a pipeline the loss lives on the last stage and the gradients on every stage: this
// stage answers reduce_gradients with its share, which the scheduler sums over the rank's
// chunks and gathers over the world (the same numbers on every rank, summed in rank order),
// and the norm comes back with gradients_summed. Replicas that hold the same reduced
// gradients (stage 0) or the same loss count once.
void report_share(StageActor* self, double square_sum) {
  auto& s = self->state;
  auto& p = s.progress;
  const bool replica_zero = s.options.rank == 0;
  const bool shard_zero = s.options.tensor_parallel.shard == 0;  // a group's ranks share the loss
  const int64_t copies = s.options.dp * s.options.tensor_parallel.size;
  p.answer = gradients_ready{
      p.step, s.last_stage() && replica_zero && shard_zero ? static_cast<double>(*s.loss->as<float>()) : 0.0,
      s.last_stage() && shard_zero ? s.flow.tokens : 0,
      s.flow.busy_s / static_cast<double>(copies),  // summed: one replica's
      s.options.zero.policy.every_rank_updates_everything() && !replica_zero ? 0.0 : square_sum};
  p.answer_ready = true;
  answer_gradients_ready(self);
}

void on_square_sum(StageActor* self, double sum) {
  auto& s = self->state;
  if (s.options.place.stages > 1) return report_share(self, sum);
  const int64_t tokens = s.flow.tokens * s.options.dp;  // every replica loads as many
  const bool tensor_parallel = s.options.tensor_parallel.size > 1;
  if (s.options.zero.policy.every_rank_updates_everything() && !tensor_parallel)  // every rank has the norm
    return gradients_known(self, static_cast<double>(*s.loss->as<float>()), sum, tokens, s.flow.busy_s);
  *s.norm->as<float>() = static_cast<float>(sum);
  self->send(s.options.comm_agent,
             all_reduce_request{tag(Tag::norm), float_span(s.norm, 0, 1), ReduceOp::sum,
                                tensor_parallel ? s.options.tensor_parallel.norm_group : s.group(),
                                caf::actor_cast<caf::actor>(self)});
}

// After the update: exchange every rank's memory peaks and busy time, then report the step.
void exchange_step_figures(StageActor* self) {
  auto& s = self->state;
  MemoryBytes peak = s.options.ledger->peak();
  auto* mine = s.step_figures->as<int64_t>() + s.options.rank * static_cast<int64_t>(kStepFields);
  for (std::size_t k = 0; k < kMemoryFields; ++k) mine[k] = peak.bytes[k];
  mine[kBusyField] = std::llround(s.flow.busy_s * 1e9);
  mine[kDeviceField] = device_bytes_of(s.options.ledger->device_peak());
  put_scale(mine, s.progress.loss_scale, s.progress.skipped);
  std::size_t floats = kStepFields * sizeof(int64_t) / sizeof(float);  // moved as raw bytes
  BufferSpan out = float_span(s.step_figures, 0, floats * static_cast<std::size_t>(s.options.dp));
  BufferSpan in = float_span(s.step_figures, floats * static_cast<std::size_t>(s.options.rank), floats);
  self->send(s.options.comm_agent, all_gather_request{tag(Tag::step_figures), std::move(in), std::move(out),
                                                      s.group(), caf::actor_cast<caf::actor>(self)});
}

void report_step(StageActor* self) {
  auto& s = self->state;
  const auto* all = s.step_figures->as<int64_t>();
  if (Status alike = check_replicas_scaled_alike(all, s.options.dp, s.options.rank, s.progress.step + 1); !alike)
    return fail(self, alike.error().message);
  int64_t largest = 0, busy_ns = 0;
  for (int64_t r = 0; r < s.options.dp; ++r) {
    const int64_t* b = all + r * static_cast<int64_t>(kStepFields);
    largest = std::max(largest, b[0] + b[1] + b[2]);
    busy_ns += b[kBusyField];
  }
  const int64_t* mine = all + s.options.rank * static_cast<int64_t>(kStepFields);
  Flow& f = s.flow;
  for (auto it = f.started.begin(); it != f.started.end();)  // the optimizer_step action is done
    it = it->second.op == pipeline::Op::optimizer_step ? f.started.erase(it) : std::next(it);
  StepStats stats{s.progress.grad_norm, largest, mine[0], mine[1], mine[2], mine[3]};
  stats.activation_bytes = mine[static_cast<std::size_t>(MemoryKind::activations)];
  stats.device_bytes = mine[kDeviceField];
  stats.busy_s = static_cast<double>(busy_ns) / 1e9 / static_cast<double>(s.options.dp);
  stats.lr = s.progress.lr;
  stats.loss_scale = s.progress.loss_scale;
  stats.skipped = s.progress.skipped;
  self->send(f.scheduler, step_applied{s.progress.step, stats});
}

// The shard owner updated this rank's blocks: bring every rank's into every rank.
void gather_updated(StageActor* self) {
  auto& s = self->state;
  const FlatLayout& layout = s.store->layout();
  auto& p = s.progress;
  p.gathers_left = 0;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  const ZeroPolicy& policy = s.store->policy();
  for (std::size_t k = 0; k < layout.row_count(); ++k) {
    if (!policy.gathers_after_update(s.store->plan().persistent(k))) continue;
    const auto& row = layout.row(k);
    std::size_t size = layout.row_elements(k);
    BufferSpan in, out;
    const DataType type = s.store->dtype();
    if (policy.partitions_parameters()) {  // a persistent row: into its own buffer
      in = typed_span(s.store->partition_parameters(), row.partition_offset, row.block, type);
      out = typed_span(s.store->row_buffer(k), 0, size, type);
    } else {
      out = typed_span(s.store->flat_parameters(), row.begin, size, type);
      in = typed_span(s.store->flat_parameters(), layout.block_begin(k, s.options.rank), row.block, type);
    }
    ++p.gathers_left;
    in.ready = out.ready = written_so_far(s.options);  // the update wrote them
    const caf::actor& to = collectives_for(s.options, out);
    self->send(to, all_gather_request{tag(Tag::parameters, k), std::move(in), std::move(out), s.group(), me});
  }
  if (p.gathers_left == 0) exchange_step_figures(self);
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
  if (kind_of(done.tag) >= Tag::sent) return on_transfer_done(self, done);
  if (!done.error.empty()) return fail(self, "a collective of the stage failed: " + done.error);
  if (s.failed) return;
  auto& p = s.progress;
  switch (kind_of(done.tag)) {
    case Tag::gradients:
      if (s.store->policy().keeps_flat_gradients()) return on_row_reduced(self);  // reduced in place
      {
        const auto& row = s.store->layout().row(row_of(done.tag));
        BufferSpan block = typed_span(s.pool->buffer(slot_of(done.tag)),
                                      row.block * static_cast<std::size_t>(s.options.rank), row.block,
                                      s.store->reduce_type());
        self->send(s.owner, absorb_gradients{row_of(done.tag), slot_of(done.tag), std::move(block),
                                             caf::actor_cast<caf::actor>(self)});
      }
      return;
    case Tag::loss:
      p.loss_reduced = true;
      p.used = parameters_used(*s.loss);
      return maybe_measure(self);
    case Tag::norm:
      return gradients_known(self, static_cast<double>(*s.loss->as<float>()),
                             static_cast<double>(*s.norm->as<float>()), s.flow.tokens * s.options.dp,
                             s.flow.busy_s);
    case Tag::tie:
      on_tie_summed(self);
      return maybe_measure(self);
    case Tag::parameters:
      if (--p.gathers_left == 0) exchange_step_figures(self);
      return;
    case Tag::step_figures:
      return report_step(self);
    case Tag::fetch:
    case Tag::sequence:
      return;
    default:  // transfers between stages: above
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
  if (s.options.compute)
    s.compute = s.options.compute;
  else if (s.options.device)
    s.compute = IssuingStream::make("compute", s.options.device->stream, s.options.device->scope,
                                    s.options.tracer, on_error);
  else
    s.compute = CpuStream::make("compute", s.options.tracer, on_error);
  // OpenMP's thread count is a per-thread setting: set it on the thread that computes.
  s.compute->enqueue(
      "", [threads = s.options.compute_threads] { torch::set_num_threads(static_cast<int>(threads)); });
  if (s.options.on_compute_thread) s.compute->enqueue("", s.options.on_compute_thread);
  s.norm = std::make_shared<HostBuffer>(sizeof(float));
  s.step_figures =
      std::make_shared<HostBuffer>(kStepFields * sizeof(int64_t) * static_cast<std::size_t>(s.options.dp));
  for (auto& layer : *s.options.model) s.layers.push_back(&layer);
  if (s.options.loss_scale) {
    auto scaler = LossScaler::make(*s.options.loss_scale);
    TROUPE_CHECK(scaler.ok(), "a validated config gives a valid loss scaler");
    s.scaler = std::move(*scaler);
  }
  if (Status built = build(self); !built) fail(self, built.error().message);
  return {
      [=](stage_action& a) {
        Tracer::Scope span(self->state.options.tracer, "stage", pipeline::op_name(a.action.op));
        accept_action(self, std::move(a));
      },
      [=](forward_computed& f) { on_forward_computed(self, f); },
      [=](eval_loss_request& r) -> caf::result<eval_loss> {
        const Flow& f = self->state.flow;
        if (self->state.failed) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        if (!f.evaluating || f.eval_batch != r.batch) return eval_loss{};
        return eval_loss{f.eval_loss_sum, f.eval_count};
      },
      [=](local_transfer& t) { on_local_transfer(self, t); },
      [=](local_neighbours& n) {
        self->state.flow.local_previous = n.previous;
        self->state.flow.local_next = n.next;
      },
      [=](backward_computed& b) { on_backward_computed(self, b); },
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
      [=](gradients_summed& g) { on_gradients_summed(self, g); },
      [=](shard_updated&) { gather_updated(self); },
      [=](collect_parameters&) { collect(self); },
      [=](describe_stage&) { return describe(self->state); },
      [=](snapshot_stage&) { snapshot(self); },
      [=](state_snapshot& got) { on_snapshot(self, got); },
      [=](restore_stage& r) { restore(self, r); },
      [=](state_restored& r) { on_restored(self, r); },
      [=](parameters_collected& c) {
        auto& st = self->state;
        if (st.collecting.empty()) return;
        st.collecting.front().deliver(std::move(c));
        st.collecting.erase(st.collecting.begin());
      },
      [=](loss_computed& l) {
        auto& st = self->state;
        if (st.failed || l.step != st.progress.step) return;
        *st.loss->as<float>() = l.loss;  // the buffer the loss all-reduce reads
        std::copy(l.used.begin(), l.used.end(), st.loss->as<float>() + 1);
        st.progress.loss_ready = true;
        reduce_loss(self);
      },
      [=](stage_failed& f) { fail(self, "compute failed: " + f.error); },
  };
}

}  // namespace

void begin_step(StageActor* self, int64_t step, int64_t micro_count) {
  auto& s = self->state;
  s.progress = StepProgress{};
  s.progress.step = step;
  s.progress.micro_count = micro_count;
  s.options.ledger->reset_peaks();
  if (!s.options.zero.policy.keeps_flat_gradients()) self->send(s.owner, begin_accumulation{});
}

namespace {

// Loss scaling (DeepSpeed's): every rank sees the same global norm of the scaled
// gradients, so each decides alike. Not finite: the step is skipped (no parameter,
// optimizer state, Adam step count or schedule position changes) and the scaler lowers the
// scale, or stops the job at its minimum. Finite: the true norm is the scaled one / scale,
// and the gradients are unscaled and clipped by one factor in the update's pass. Returns
// the factor the gradients take (1 / scale without clipping), or nothing when skipped.
std::optional<double> unscale(StageActor* self) {
  auto& s = self->state;
  auto& p = s.progress;
  if (!s.scaler) return 1.0;
  const double scale = s.scaler->scale();
  p.loss_scale = scale;
  const bool overflow = !std::isfinite(p.grad_norm);
  if (Status updated = s.scaler->update(overflow); !updated) {
    fail(self, fmt::format("step {}: {}", p.step + 1, updated.error().message));
    return std::nullopt;
  }
  if (overflow) {
    p.skipped = true;
    return std::nullopt;
  }
  p.grad_norm /= scale;
  return 1.0 / scale;
}

}  // namespace

void apply_update(StageActor* self) {
  Tracer::Scope span(self->state.options.tracer, "stage", "optimizer_step");
  auto& s = self->state;
  // The schedule's value for this update: DeepSpeed steps its schedule after each update.
  UpdateHyper hyper;
  if (s.options.lr_schedule) hyper = s.options.lr_schedule->for_update(s.updates_applied);
  s.progress.lr = hyper.lr.value_or(s.options.rule.lr);
  std::optional<double> unscaled = unscale(self);
  if (!unscaled) {
    if (!s.failed) exchange_step_figures(self);  // skipped: the parameters are as they were
    return;
  }
  double scale = clip_scale(s.progress.grad_norm, s.options.zero.gradient_clipping) * *unscaled;
  ++s.updates_applied;
  self->send(s.owner,
             update_shard{s.progress.step, scale, s.progress.used, hyper, caf::actor_cast<caf::actor>(self)});
}

}  // namespace troupe::stage

namespace troupe {

caf::actor spawn_stage(caf::actor_system& system, StageOptions options) {
  return system.spawn(stage::stage_behavior, std::move(options));
}

}  // namespace troupe
