#include "actors/offload_manager.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "actors/protocol/offload.hpp"
#include "actors/stream.hpp"
#include "kernels/cpu/optimizer.hpp"
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

// The partition cut into sub-groups of at most `limit` elements.
std::vector<PartitionSpan> cut(const std::vector<PartitionSpan>& partition, std::size_t limit) {
  std::vector<PartitionSpan> groups;
  for (const PartitionSpan& span : partition)
    for (std::size_t at = 0; at < span.count; at += limit)
      groups.push_back(
          PartitionSpan{span.parameters + at, span.gradients + at, std::min(limit, span.count - at)});
  return groups;
}

struct Group {
  PartitionSpan span;
  std::shared_ptr<HostBuffer> state;  // tier "cpu": the state itself
  std::byte* buffer = nullptr;        // tier "nvme": the swap buffer while in flight
  bool stored = false;                // tier "nvme": its file holds the state
  int64_t io_start_us = 0;
};

struct OffloadState {
  OffloadManagerOptions options;
  std::vector<Group> groups;
  std::size_t states = 0;  // fp32 values of state per element
  std::unique_ptr<AlignedPool> pool;
  std::unique_ptr<NvmeStore> store;
  std::unique_ptr<CpuStream> stream;  // last: its thread stops before what it touches goes
  std::string broken;                 // why the tier cannot be used, once it cannot
  int64_t step = 0;                   // the training step of the pass in flight, for the reply
  int64_t updates = 0;                // passes begun: the optimizer's own step count (1-based in the kernels)
  caf::actor reply_to;
  std::size_t next_read = 0, stored = 0;
  bool in_pass = false;
  static inline const char* name = "offload_manager";

  ~OffloadState() {
    stream.reset();  // no update runs on a swap buffer (or on the partition) any more
    store.reset();   // finishes what was submitted: no I/O touches one either
    for (Group& g : groups)
      if (g.buffer != nullptr) pool->release(g.buffer);
  }
};
using OffloadManager = caf::stateful_actor<OffloadState>;

std::size_t state_bytes(const OffloadState& s, const Group& g) {
  return round_up(std::max<std::size_t>(g.span.count * s.states * sizeof(float), 1), kPage);
}

std::string key_of(std::size_t group) {
  return fmt::format("optimizer-{:05}.bin", group);
}

// Tier "cpu": the whole state in host memory, within the budget.
Status open_cpu_tier(OffloadState& s) {
  std::size_t bytes = 0;
  for (const Group& g : s.groups) bytes += g.span.count * s.states * sizeof(float);
  if (s.options.offload.host_budget_bytes > 0 &&
      bytes > static_cast<std::size_t>(s.options.offload.host_budget_bytes))
    return make_error(
        fmt::format("[offload] optimizer = \"cpu\" keeps {} bytes of optimizer state in host memory, "
                    "more than host_budget_bytes = {}; use optimizer = \"nvme\"",
                    bytes, s.options.offload.host_budget_bytes));
  for (Group& g : s.groups)
    if (s.states > 0)
      g.state = std::make_shared<HostBuffer>(g.span.count * s.states * sizeof(float), s.options.ledger,
                                             MemoryKind::optimizer_state);
  return {};
}

// Tier "nvme": this rank's folder, the store, and the swap buffers.
Status open_nvme_tier(OffloadState& s) {
  const OffloadOptions& o = s.options.offload;
  if (auto made = make_directory(o.nvme_dir); !made)
    return make_error("[offload] nvme_path: " + made.error().message);
  NvmeStoreOptions store_options;
  store_options.block_size = static_cast<std::size_t>(o.block_size);
  store_options.queue_depth = static_cast<unsigned>(o.queue_depth);
  store_options.io_timeout = std::chrono::milliseconds(static_cast<int64_t>(s.options.io_timeout_s * 1000));
  store_options.ledger = s.options.ledger;
  auto store = NvmeStore::open(o.nvme_dir, store_options);
  if (!store) return make_error("[offload] nvme_path: " + store.error().message);
  s.store = std::move(*store);
  std::size_t largest = 0;
  for (const Group& g : s.groups) largest = std::max(largest, state_bytes(s, g));
  auto pool = AlignedPool::make(AlignedPoolOptions{largest, static_cast<std::size_t>(o.buffer_count),
                                                   s.options.ledger, MemoryKind::optimizer_state,
                                                   "optimizer swap buffers"});
  if (!pool) return pool.error();
  s.pool = std::move(*pool);
  return {};
}

Status open_tier(OffloadState& s) {
  s.states = static_cast<std::size_t>(s.options.rule.states_per_element());
  const OffloadOptions& o = s.options.offload;
  auto limit = sub_group_limit(o.sub_group_size, o.host_budget_bytes, o.buffer_count, s.states);
  if (!limit) return limit.error();
  for (const PartitionSpan& span : cut(s.options.partition, std::max<std::size_t>(*limit, 1)))
    s.groups.push_back(Group{span, nullptr, nullptr, false, 0});
  if (s.states == 0) return {};  // plain SGD keeps no state
  return s.options.offload.tier == "nvme" ? open_nvme_tier(s) : open_cpu_tier(s);
}

// The fused update of one sub-group whose state is at `state` (m then v, or the momentum).
void update(const OptimizerRule& rule, int64_t step, const PartitionSpan& span, float* state, int threads) {
  if (rule.kind == OptimizerRule::Kind::sgd) {
    kernels::SgdParams p;
    p.lr = rule.lr;
    p.momentum = rule.momentum;
    p.weight_decay = rule.weight_decay;
    p.nesterov = rule.nesterov;
    p.first_step = step == 1;
    kernels::sgd_step(span.parameters, span.gradients, state, span.count, p);
    return;
  }
  kernels::AdamParams p;
  p.lr = rule.lr;
  p.beta1 = rule.beta1;
  p.beta2 = rule.beta2;
  p.eps = rule.eps;
  p.weight_decay = rule.weight_decay;
  p.decoupled = rule.kind == OptimizerRule::Kind::adamw;
  p.step = step;
  kernels::adam_step_parallel(span.parameters, span.gradients, state, state + span.count, span.count, p,
                              kernels::Precision16::none, nullptr, threads);
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

void enqueue_update(OffloadManager* self, std::size_t i, float* state) {
  auto& s = self->state;
  const Group& g = s.groups[i];
  s.stream->enqueue(
      fmt::format("update group {}", i),
      [rule = s.options.rule, step = s.updates, span = g.span, state,
       threads = static_cast<int>(s.options.threads)] { update(rule, step, span, state, threads); });
  s.stream->notify(s.stream->record(), caf::actor_cast<caf::actor>(self),
                   caf::make_message(group_updated{i}));
}

// Tier "nvme": start reading the next sub-groups while swap buffers are free.
void read_ahead(OffloadManager* self) {
  auto& s = self->state;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  while (s.next_read < s.groups.size()) {
    std::byte* buffer = s.pool->try_acquire();
    if (buffer == nullptr) return;
    std::size_t i = s.next_read++;
    Group& g = s.groups[i];
    g.buffer = buffer;
    if (!g.stored) {  // first use: the state starts at zero
      std::memset(buffer, 0, state_bytes(s, g));
      self->send(me, state_loaded{i, ""});
      continue;
    }
    g.io_start_us = Tracer::now_us();
    Tracer* tracer = s.options.tracer;
    s.store->read(key_of(i), buffer, g.span.count * s.states * sizeof(float),
                  [me, i, tracer, start = g.io_start_us](Status status) {
                    if (tracer)
                      tracer->span("nvme", fmt::format("read group {}", i), start, Tracer::now_us());
                    caf::anon_send(me, state_loaded{i, status.ok() ? "" : status.error().message});
                  });
  }
}

void start_pass(OffloadManager* self, const optimizer_pass& p) {
  auto& s = self->state;
  s.reply_to = p.reply_to;
  s.step = p.step;
  s.in_pass = true;
  if (!s.broken.empty()) return finish_pass(self, s.broken);
  s.next_read = 0;
  s.stored = 0;
  ++s.updates;
  if (s.groups.empty()) return finish_pass(self, "");
  if (!s.store) {  // tier "cpu", or no state at all
    for (std::size_t i = 0; i < s.groups.size(); ++i)
      enqueue_update(self, i, s.groups[i].state ? s.groups[i].state->as<float>() : nullptr);
    return;
  }
  read_ahead(self);
}

void on_updated(OffloadManager* self, std::size_t i) {
  auto& s = self->state;
  if (!s.in_pass) return;
  if (!s.store) {
    if (++s.stored == s.groups.size()) finish_pass(self, "");
    return;
  }
  Group& g = s.groups[i];
  caf::actor me = caf::actor_cast<caf::actor>(self);
  Tracer* tracer = s.options.tracer;
  g.io_start_us = Tracer::now_us();
  s.store->write(key_of(i), g.buffer, g.span.count * s.states * sizeof(float),
                 [me, i, tracer, start = g.io_start_us](Status status) {
                   if (tracer)
                     tracer->span("nvme", fmt::format("write group {}", i), start, Tracer::now_us());
                   caf::anon_send(me, state_stored{i, status.ok() ? "" : status.error().message});
                 });
}

caf::behavior offload_manager_behavior(OffloadManager* self, OffloadManagerOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  s.stream = CpuStream::make(
      "offload", s.options.tracer, [me = caf::actor_cast<caf::actor>(self)](const std::string& what) {
        caf::anon_send(me, state_stored{~uint64_t{0}, "the optimizer kernel failed: " + what});
      });
  if (auto opened = open_tier(s); !opened) s.broken = opened.error().message;
  return {
      [=](optimizer_pass& p) { start_pass(self, p); },
      [=](state_loaded& l) {
        auto& st = self->state;
        if (!st.in_pass || !l.error.empty()) {  // a failed pass: the buffer is free again
          give_back(st, l.group);
          return finish_pass(self, l.error);
        }
        enqueue_update(self, l.group, reinterpret_cast<float*>(st.groups[l.group].buffer));
      },
      [=](group_updated& u) { on_updated(self, u.group); },
      [=](state_stored& w) {
        auto& st = self->state;
        if (!st.in_pass || !w.error.empty()) {
          give_back(st, w.group);
          return finish_pass(self, w.error);
        }
        st.groups[w.group].stored = true;
        give_back(st, w.group);
        if (++st.stored == st.groups.size()) return finish_pass(self, "");
        read_ahead(self);
      },
  };
}

}  // namespace

caf::actor spawn_offload_manager(caf::actor_system& system, OffloadManagerOptions options) {
  return system.spawn(offload_manager_behavior, std::move(options));
}

}  // namespace troupe
