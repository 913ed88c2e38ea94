#include "actors/offload_manager.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "actors/protocol/checkpoint.hpp"
#include "actors/protocol/offload.hpp"
#include "actors/stream.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/precision.hpp"
#include "memory/aligned_pool.hpp"
#include "memory/host_buffer.hpp"
#include "memory/nvme_store.hpp"
#include "memory/offload_plan.hpp"

namespace troupe {
namespace {

constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t n, std::size_t unit) {
  return (n + unit - 1) / unit * unit;
}

// Widened 16-bit gradients go through a scratch tile this long (256 KiB of fp32).
constexpr std::size_t kWideTile = 65536;

struct Group {
  PartitionSpan span;                 // parameters null while they live on NVMe
  std::size_t at = 0;                 // where the span starts in its shard's
  std::string parameter_key;          // set: the parameters' piece in the ParameterSwap
  std::shared_ptr<HostBuffer> state;  // the state in host memory (tier "cpu")
  std::byte* buffer = nullptr;        // the swap buffer while in flight
  bool state_stored = false;          // tier "nvme": its file holds the state
  int io_left = 0;                    // reads or writes of the group in flight
  std::string io_error;               // the first of them to fail
};

// A checkpoint's copy of the partition, out of its tiers (snapshot) or into them (restore):
// groups in memory are copied on the stream; swapped ones go one at a time through a swap
// buffer (read then copied out, or copied in then written).
struct CheckpointWork {
  bool restoring = false;
  PartitionState state;
  std::vector<std::size_t> bases;  // by shard: where it starts in the arrays
  std::size_t next = 0;            // the next group to copy
  caf::actor reply_to;
};

struct OffloadState {
  OffloadManagerOptions options;
  std::vector<Group> groups;
  std::size_t states = 0;  // fp32 values of state per element
  std::unique_ptr<AlignedPool> pool;
  std::unique_ptr<NvmeStore> store;   // tier "nvme": the optimizer state
  std::unique_ptr<CpuStream> stream;  // last: its thread stops before what it touches goes
  std::string broken;                 // why the tier cannot be used, once it cannot
  int64_t step = 0;                   // the training step of the pass in flight, for the reply
  OptimizerRule pass_rule;            // the rule with the pass's rate and betas
  float gradient_scale = 1;           // the pass's factor for 16-bit gradients
  ParameterUse used;                  // the parameters the pass in flight updates (null: all)
  ParameterSteps steps;               // the optimizer's own step count of each parameter
  std::optional<CheckpointWork> checkpoint;  // a snapshot or restore in flight
  // The last snapshot's arrays, reused by the next once the writer has let go of them (the
  // engine waits for a save before the next snapshot): no fresh pages to fault in per save.
  std::vector<std::shared_ptr<HostBuffer>> snapshot_arrays;
  caf::actor reply_to;
  std::size_t next_read = 0, stored = 0;
  bool in_pass = false;
  static inline const char* name = "offload_manager";

  ~OffloadState() {
    stream.reset();  // no update runs on a swap buffer (or on the partition) any more
    store.reset();   // finishes what was submitted: no I/O touches one either
    options.parameter_swap.reset();
    for (Group& g : groups)
      if (g.buffer != nullptr) pool->release(g.buffer);
  }
};
using OffloadManager = caf::stateful_actor<OffloadState>;

bool state_swapped(const OffloadState& s) {
  return s.store != nullptr;
}

bool swaps(const OffloadState& s, const Group& g) {
  return state_swapped(s) || !g.parameter_key.empty();
}

// A swap buffer holds the state (when it is swapped) and then, from the next page, the
// parameters (when they are).
std::size_t state_region(const OffloadState& s, const Group& g) {
  return state_swapped(s) ? round_up(g.span.count * s.states * sizeof(float), kPage) : 0;
}

std::size_t buffer_bytes(const OffloadState& s, const Group& g) {
  std::size_t params = g.parameter_key.empty() ? 0 : round_up(g.span.count * sizeof(float), kPage);
  return std::max(state_region(s, g) + params, kPage);
}

std::string key_of(std::size_t group) {
  return fmt::format("optimizer-{:05}.bin", group);
}

// The sub-groups: spans in host memory cut to `limit`, swapped rows by their pieces.
void make_groups(OffloadState& s, std::size_t limit) {
  for (const PartitionSpan& span : s.options.partition) {
    if (span.parameters != nullptr) {
      for (std::size_t at = 0; at < span.count; at += limit) {
        Group& g = s.groups.emplace_back();
        g.span = span.slice(at, std::min(limit, span.count - at));
        g.at = at;
      }
      continue;
    }
    for (const ParameterSwap::Piece& piece : s.options.parameter_swap->pieces(span.row)) {
      Group& g = s.groups.emplace_back();
      g.span = span.slice(piece.offset, piece.count);
      g.span.parameters = nullptr;
      g.at = piece.offset;
      g.parameter_key = piece.key;
    }
  }
}

// Tier "cpu": the whole state in host memory; with the swap buffers, within the budget.
Status open_cpu_tier(OffloadState& s, std::size_t swap_bytes) {
  std::size_t bytes = 0;
  for (const Group& g : s.groups) bytes += g.span.count * s.states * sizeof(float);
  if (s.options.offload.host_budget_bytes > 0 &&
      bytes + swap_bytes > static_cast<std::size_t>(s.options.offload.host_budget_bytes))
    return make_error(
        fmt::format("[offload] optimizer = \"cpu\" keeps {} bytes of optimizer state in host memory{}, "
                    "more than host_budget_bytes = {}; use optimizer = \"nvme\"",
                    bytes, swap_bytes > 0 ? fmt::format(" and {} of parameter swap buffers", swap_bytes) : "",
                    s.options.offload.host_budget_bytes));
  for (Group& g : s.groups)
    if (s.states > 0)
      g.state = std::make_shared<HostBuffer>(g.span.count * s.states * sizeof(float), s.options.ledger,
                                             MemoryKind::optimizer_state);
  return {};
}

// Tier "nvme": this rank's folder and the store of the optimizer state.
Status open_nvme_tier(OffloadState& s) {
  auto store = open_nvme_store(s.options.offload, s.options.io_timeout_s, s.options.ledger, s.options.tracer);
  if (!store) return store.error();
  s.store = std::move(*store);
  return {};
}

Status open_tier(OffloadState& s) {
  s.states = static_cast<std::size_t>(s.options.rule.states_per_element());
  const OffloadOptions& o = s.options.offload;
  auto limit = sub_group_limit(o.sub_group_size, o.host_budget_bytes, o.buffer_count, s.states);
  if (!limit) return limit.error();
  make_groups(s, std::max<std::size_t>(*limit, 1));
  if (s.states > 0 && o.state_on_nvme) TROUPE_TRY(open_nvme_tier(s));
  std::size_t largest = 0;
  for (const Group& g : s.groups)
    if (swaps(s, g)) largest = std::max(largest, buffer_bytes(s, g));
  std::size_t swap_bytes = largest * static_cast<std::size_t>(o.buffer_count);
  if (s.states > 0 && !o.state_on_nvme) TROUPE_TRY(open_cpu_tier(s, swap_bytes));
  if (largest == 0) return {};
  auto pool = AlignedPool::make(AlignedPoolOptions{largest, static_cast<std::size_t>(o.buffer_count),
                                                   s.options.ledger, MemoryKind::optimizer_state,
                                                   "offload swap buffers"});
  if (!pool) return pool.error();
  s.pool = std::move(*pool);
  return {};
}

// One fused step over n elements: parameters, gradients, state (Adam: m and v; SGD: the
// momentum, or none), and with a precision the 16-bit copy written in the same pass.
struct StepArrays {
  float* parameters = nullptr;
  const float* gradients = nullptr;
  float* first = nullptr;
  float* second = nullptr;
  uint16_t* copy16 = nullptr;
  std::size_t count = 0;
  int64_t step = 0;
};

void step(const OptimizerRule& rule, const StepArrays& a, kernels::Precision16 precision, int threads) {
  if (rule.kind == OptimizerRule::Kind::sgd) {
    kernels::SgdParams p;
    p.lr = rule.lr;
    p.momentum = rule.momentum;
    p.weight_decay = rule.weight_decay;
    p.nesterov = rule.nesterov;
    p.first_step = a.step == 1;
    kernels::sgd_step(a.parameters, a.gradients, a.first, a.count, p);
    if (precision != kernels::Precision16::none)
      kernels::cast_from_f32(a.parameters, a.copy16, a.count, kernels::data_type_of(precision));
    return;
  }
  kernels::adam_step_parallel(a.parameters, a.gradients, a.first, a.second, a.count,
                              adam_params_of(rule, a.step), precision, a.copy16, threads);
}

// The fused update of one segment of a sub-group whose state is at `state` (m then v
// over the whole group, or the momentum). Mixed precision: tile by tile, each tile's
// 16-bit gradients widened (and scaled) into fp32 first.
void update(const OptimizerRule& rule, const UpdateSegment& segment, const PartitionSpan& span, float* state,
            int threads, float gradient_scale) {
  auto arrays = [&](std::size_t at, std::size_t n) {
    return StepArrays{span.parameters + at,
                      span.gradients ? span.gradients + at : nullptr,
                      state ? state + at : nullptr,
                      state && rule.kind != OptimizerRule::Kind::sgd ? state + span.count + at : nullptr,
                      span.copy16 ? span.copy16 + at : nullptr,
                      n,
                      segment.step};
  };
  if (span.gradients16 == nullptr)  // fp32 gradients (with or without a 16-bit copy)
    return step(rule, arrays(segment.offset, segment.count), span.precision, threads);
  const DataType type = kernels::data_type_of(span.precision);
  std::vector<float> wide(std::min(kWideTile, segment.count));
  for (std::size_t done = 0; done < segment.count; done += kWideTile) {
    std::size_t n = std::min(kWideTile, segment.count - done);
    std::size_t at = segment.offset + done;
    kernels::cast_to_f32(span.gradients16 + at, type, wide.data(), n);
    if (gradient_scale != 1.0F) kernels::scale(wide.data(), n, gradient_scale);
    StepArrays a = arrays(at, n);
    a.gradients = wide.data();
    step(rule, a, span.precision, threads);
  }
}

// Returns sub-group `i`'s swap buffer to the pool (if it holds one; i may be out of range).
void give_back(OffloadState& s, uint64_t i) {
  if (i >= s.groups.size() || s.groups[i].buffer == nullptr) return;
  s.pool->release(s.groups[i].buffer);
  s.groups[i].buffer = nullptr;
}

void finish_pass(OffloadManager* self, const std::string& error) {
  auto& s = self->state;
  if (!s.in_pass) return;
  s.in_pass = false;
  if (!error.empty() && s.broken.empty()) s.broken = error;
  self->send(s.reply_to, optimizer_pass_done{s.step, error});
}

void enqueue_update(OffloadManager* self, std::size_t i) {
  auto& s = self->state;
  const Group& g = s.groups[i];
  PartitionSpan span = g.span;
  if (!g.parameter_key.empty()) span.parameters = reinterpret_cast<float*>(g.buffer + state_region(s, g));
  float* state = state_swapped(s) ? reinterpret_cast<float*>(g.buffer)
                 : g.state        ? g.state->as<float>()
                                  : nullptr;
  std::vector<UpdateSegment> segments = update_segments(span.runs, span.count, s.used, s.steps);
  s.stream->enqueue(fmt::format("update group {}", i),
                    [rule = s.pass_rule, segments = std::move(segments), span = std::move(span), state,
                     threads = static_cast<int>(s.options.threads), scale = s.gradient_scale] {
                      for (const UpdateSegment& segment : segments)
                        update(rule, segment, span, state, threads, scale);
                    });
  s.stream->notify(s.stream->record(), caf::actor_cast<caf::actor>(self),
                   caf::make_message(group_updated{i}));
}

// One read or write of group `i`, completing as message `Done` to the manager.
template <class Done>
void transfer(OffloadManager* self, NvmeStore& store, bool write, const std::string& key, std::byte* data,
              std::size_t bytes, std::size_t i) {
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto done = [me, i](Status status) {  // the store traces the transfer itself
    caf::anon_send(me, Done{i, status.ok() ? "" : status.error().message});
  };
  ++self->state.groups[i].io_left;
  if (write)
    store.write(key, data, bytes, std::move(done));
  else
    store.read(key, data, bytes, std::move(done));
}

// Starts loading group `i` into its buffer: the state (zero on first use) and the parameters.
template <class Done = state_loaded>
void load(OffloadManager* self, std::size_t i) {
  auto& s = self->state;
  Group& g = s.groups[i];
  g.io_left = 1;  // until every read is started
  g.io_error.clear();
  if (state_swapped(s) && !g.state_stored) std::memset(g.buffer, 0, state_region(s, g));
  if (state_swapped(s) && g.state_stored)
    transfer<Done>(self, *s.store, false, key_of(i), g.buffer, g.span.count * s.states * sizeof(float), i);
  if (!g.parameter_key.empty())
    transfer<Done>(self, s.options.parameter_swap->store(), false, g.parameter_key,
                   g.buffer + state_region(s, g), g.span.count * sizeof(float), i);
}

// Start loading the next sub-groups while swap buffers are free.
void read_ahead(OffloadManager* self) {
  auto& s = self->state;
  while (s.next_read < s.groups.size()) {
    Group& g = s.groups[s.next_read];
    std::byte* buffer = nullptr;
    if (swaps(s, g) && (buffer = s.pool->try_acquire()) == nullptr) return;
    std::size_t i = s.next_read++;
    g.buffer = buffer;
    load(self, i);
    self->send(self, state_loaded{i, ""});  // the reads are started
  }
}

void start_pass(OffloadManager* self, const optimizer_pass& p) {
  auto& s = self->state;
  s.reply_to = p.reply_to;
  s.step = p.step;
  s.used = p.used;
  s.pass_rule = s.options.rule.with(p.hyper);
  s.gradient_scale = static_cast<float>(p.gradient_scale);
  s.in_pass = true;
  if (!s.broken.empty()) return finish_pass(self, s.broken);
  if (s.checkpoint) return finish_pass(self, "an update arrived while a checkpoint copied the partition");
  s.next_read = 0;
  s.stored = 0;
  s.steps.advance(s.used);
  if (s.groups.empty()) return finish_pass(self, "");
  if (!s.pool) {  // nothing is swapped: update every sub-group in place
    for (std::size_t i = 0; i < s.groups.size(); ++i) enqueue_update(self, i);
    return;
  }
  read_ahead(self);
}

// Counts one of group `i`'s transfers (or the guard of their start) done; true when the
// group's transfers are all done and none failed during a pass, else the buffer is free
// again and a failure ends the pass.
bool transfers_done(OffloadManager* self, std::size_t i, const std::string& error) {
  auto& s = self->state;
  if (i >= s.groups.size()) {  // the stream failed
    finish_pass(self, error);
    return false;
  }
  Group& g = s.groups[i];
  if (!error.empty() && g.io_error.empty()) g.io_error = error;
  if (--g.io_left > 0) return false;
  if (s.in_pass && g.io_error.empty()) return true;
  give_back(s, i);
  finish_pass(self, g.io_error);
  return false;
}

void on_updated(OffloadManager* self, std::size_t i) {
  auto& s = self->state;
  if (!s.in_pass) return;
  Group& g = s.groups[i];
  if (!s.pool) {
    if (++s.stored == s.groups.size()) finish_pass(self, "");
    return;
  }
  g.io_left = 1;
  if (state_swapped(s))
    transfer<state_stored>(self, *s.store, true, key_of(i), g.buffer, g.span.count * s.states * sizeof(float),
                           i);
  if (!g.parameter_key.empty())
    transfer<state_stored>(self, s.options.parameter_swap->store(), true, g.parameter_key,
                           g.buffer + state_region(s, g), g.span.count * sizeof(float), i);
  self->send(self, state_stored{i, ""});  // the writes are started
}

void on_stored(OffloadManager* self, std::size_t i, const std::string& error) {
  auto& s = self->state;
  if (!transfers_done(self, i, error)) return;
  s.groups[i].state_stored = state_swapped(s);
  give_back(s, i);
  if (++s.stored == s.groups.size()) return finish_pass(self, "");
  read_ahead(self);
}

// Checkpoints. Between passes every swap buffer is free, so a swapped group can borrow one.
constexpr uint64_t kEveryGroup = ~uint64_t{0};

void end_checkpoint(OffloadManager* self, const std::string& error) {
  auto& s = self->state;
  if (!s.checkpoint) return;
  CheckpointWork w = std::move(*s.checkpoint);
  s.checkpoint.reset();
  for (std::size_t i = 0; i < s.groups.size(); ++i) give_back(s, i);
  if (w.restoring) return self->send(w.reply_to, state_restored{error});
  if (!error.empty()) w.state = PartitionState{};
  self->send(w.reply_to, state_snapshot{std::move(w.state), error});
}

// On the stream: group `i`'s values and state (in memory or in its swap buffer) copied out
// to the arrays, or in from them (the 16-bit copy rewritten from the restored values).
void copy_group(OffloadManager* self, std::size_t i) {
  auto& s = self->state;
  const Group& g = s.groups[i];
  const CheckpointWork& w = *s.checkpoint;
  const std::size_t at = w.bases[g.span.row] + g.at;
  float* values =
      g.parameter_key.empty() ? g.span.parameters : reinterpret_cast<float*>(g.buffer + state_region(s, g));
  float* state = state_swapped(s) ? reinterpret_cast<float*>(g.buffer)
                 : g.state        ? g.state->as<float>()
                                  : nullptr;
  std::vector<float*> arrays;
  for (const auto& a : w.state.arrays) arrays.push_back(a->as<float>() + at);
  s.stream->enqueue(fmt::format("{} group {}", w.restoring ? "restore" : "snapshot", i),
                    [values, state, arrays, restoring = w.restoring, n = g.span.count, copy16 = g.span.copy16,
                     precision = g.span.precision] {
                      for (std::size_t k = 0; k < arrays.size(); ++k) {
                        float* mine = k == 0 ? values : state + (k - 1) * n;
                        if (restoring)
                          std::memcpy(mine, arrays[k], n * sizeof(float));
                        else
                          std::memcpy(arrays[k], mine, n * sizeof(float));
                      }
                      if (restoring && copy16 != nullptr)
                        kernels::cast_from_f32(values, copy16, n, kernels::data_type_of(precision));
                    });
}

// Issues the groups in order: those in memory at once, a swapped one through a swap buffer
// (the rest wait for it); after the last, answers once the stream has run every copy.
void checkpoint_next(OffloadManager* self) {
  auto& s = self->state;
  CheckpointWork& w = *s.checkpoint;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  while (w.next < s.groups.size()) {
    const std::size_t i = w.next++;
    Group& g = s.groups[i];
    if (!swaps(s, g)) {
      copy_group(self, i);
      continue;
    }
    g.buffer = s.pool->try_acquire();
    if (g.buffer == nullptr) return end_checkpoint(self, "no free swap buffer between passes");
    if (w.restoring) {
      copy_group(self, i);
      s.stream->notify(s.stream->record(), me, caf::make_message(checkpoint_copied{i}));
    } else {
      load<checkpoint_io>(self, i);
      self->send(self, checkpoint_io{i, ""});  // the reads are started
    }
    return;
  }
  s.stream->notify(s.stream->record(), me, caf::make_message(checkpoint_copied{kEveryGroup}));
}

void start_checkpoint(OffloadManager* self, bool restoring, PartitionState state, caf::actor reply_to) {
  auto& s = self->state;
  std::string refused = !s.broken.empty() ? s.broken
                        : s.in_pass       ? "an optimizer pass is in flight"
                        : s.checkpoint    ? "another checkpoint is in flight"
                                          : "";
  std::vector<std::size_t> bases;
  std::size_t total = 0;
  for (const PartitionSpan& span : s.options.partition) {
    bases.push_back(total);
    total += span.count;
  }
  if (!restoring) {
    const std::size_t bytes = std::max<std::size_t>(total, 1) * sizeof(float);
    s.snapshot_arrays.resize(s.states + 1);
    for (auto& array : s.snapshot_arrays) {
      if (!array || array.use_count() > 1 || array->bytes() != bytes)
        array = std::make_shared<HostBuffer>(bytes);
      state.arrays.push_back(array);
    }
  } else if (refused.empty() &&
             (state.arrays.size() != s.states + 1 || state.steps.size() < s.steps.counts().size()))
    refused =
        fmt::format("the restored state has {} arrays and {} step counts; this partition needs {} and {}",
                    state.arrays.size(), state.steps.size(), s.states + 1, s.steps.counts().size());
  state.steps.resize(s.steps.counts().size());  // by position, up to the last this partition holds
  s.checkpoint = CheckpointWork{restoring, std::move(state), std::move(bases), 0, std::move(reply_to)};
  if (!refused.empty()) return end_checkpoint(self, refused);
  if (restoring)
    s.steps.restore(s.checkpoint->state.steps);
  else
    s.checkpoint->state.steps = s.steps.counts();
  checkpoint_next(self);
}

// A swapped group's transfers for the checkpoint finished: a snapshot copies it out, a
// restore has written it back (its state now in its file).
void on_checkpoint_io(OffloadManager* self, const checkpoint_io& io) {
  auto& s = self->state;
  if (!s.checkpoint || io.group >= s.groups.size()) return;
  Group& g = s.groups[io.group];
  if (!io.error.empty() && g.io_error.empty()) g.io_error = io.error;
  if (--g.io_left > 0) return;
  if (!g.io_error.empty()) return end_checkpoint(self, g.io_error);
  if (s.checkpoint->restoring) {
    g.state_stored = state_swapped(s) || g.state_stored;
    give_back(s, io.group);
    return checkpoint_next(self);
  }
  copy_group(self, io.group);
  s.stream->notify(s.stream->record(), caf::actor_cast<caf::actor>(self),
                   caf::make_message(checkpoint_copied{io.group}));
}

void on_checkpoint_copied(OffloadManager* self, uint64_t i) {
  auto& s = self->state;
  if (!s.checkpoint) return;
  if (i == kEveryGroup) return end_checkpoint(self, "");
  if (!s.checkpoint->restoring) {
    give_back(s, i);
    return checkpoint_next(self);
  }
  Group& g = s.groups[i];  // restored into its buffer: written back to its tiers
  g.io_left = 1;
  g.io_error.clear();
  if (state_swapped(s))
    transfer<checkpoint_io>(self, *s.store, true, key_of(i), g.buffer,
                            g.span.count * s.states * sizeof(float), i);
  if (!g.parameter_key.empty())
    transfer<checkpoint_io>(self, s.options.parameter_swap->store(), true, g.parameter_key,
                            g.buffer + state_region(s, g), g.span.count * sizeof(float), i);
  self->send(self, checkpoint_io{i, ""});  // the writes are started
}

caf::behavior offload_manager_behavior(OffloadManager* self, OffloadManagerOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  s.stream = CpuStream::make(
      "offload", s.options.tracer, [me = caf::actor_cast<caf::actor>(self)](const std::string& what) {
        caf::anon_send(me, state_stored{~uint64_t{0}, "the optimizer kernel failed: " + what});
      });
  std::size_t parameters = 0;
  for (const PartitionSpan& span : s.options.partition)
    for (const ParameterRun& run : span.runs) parameters = std::max(parameters, run.parameter + 1);
  s.steps = ParameterSteps(parameters);
  if (auto opened = open_tier(s); !opened) s.broken = opened.error().message;
  return {
      [=](optimizer_pass& p) { start_pass(self, p); },
      [=](state_loaded& l) {
        if (transfers_done(self, l.group, l.error)) enqueue_update(self, l.group);
      },
      [=](group_updated& u) { on_updated(self, u.group); },
      [=](state_stored& w) { on_stored(self, w.group, w.error); },
      [=](snapshot_state& r) { start_checkpoint(self, false, PartitionState{}, r.reply_to); },
      [=](restore_state& r) { start_checkpoint(self, true, std::move(r.state), r.reply_to); },
      [=](checkpoint_io& io) { on_checkpoint_io(self, io); },
      [=](checkpoint_copied& c) { on_checkpoint_copied(self, c.group); },
  };
}

}  // namespace

Result<std::unique_ptr<NvmeStore>> open_nvme_store(const OffloadOptions& o, double io_timeout_s,
                                                   std::shared_ptr<MemoryLedger> ledger, Tracer* tracer) {
  if (auto made = make_directory(o.nvme_dir); !made)
    return make_error("[offload] nvme_path: " + made.error().message);
  NvmeStoreOptions options;
  options.block_size = static_cast<std::size_t>(o.block_size);
  options.queue_depth = static_cast<unsigned>(o.queue_depth);
  options.direct_io = o.direct_io;
  options.io_timeout = std::chrono::milliseconds(static_cast<int64_t>(io_timeout_s * 1000));
  options.ledger = std::move(ledger);
  options.tracer = tracer;
  auto store = NvmeStore::open(o.nvme_dir, options);
  if (!store) return make_error("[offload] nvme_path: " + store.error().message);
  return store;
}

caf::actor spawn_offload_manager(caf::actor_system& system, OffloadManagerOptions options) {
  return system.spawn(offload_manager_behavior, std::move(options));
}

PartitionSpan PartitionSpan::slice(std::size_t at, std::size_t n) const {
  PartitionSpan out = *this;
  if (parameters) out.parameters = parameters + at;
  if (gradients) out.gradients = gradients + at;
  if (gradients16) out.gradients16 = gradients16 + at;
  if (copy16) out.copy16 = copy16 + at;
  out.count = n;
  out.runs = runs_within(runs, at, n);
  return out;
}

kernels::AdamParams adam_params_of(const OptimizerRule& rule, int64_t step) {
  kernels::AdamParams p;
  p.lr = rule.lr;
  p.beta1 = rule.beta1;
  p.beta2 = rule.beta2;
  p.eps = rule.eps;
  p.weight_decay = rule.weight_decay;
  p.decoupled = rule.kind == OptimizerRule::Kind::adamw;
  p.step = step;
  return p;
}

}  // namespace troupe
