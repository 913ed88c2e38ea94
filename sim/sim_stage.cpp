#include "sim/sim_stage.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include <fmt/format.h>

#include "actors/protocol/pipeline.hpp"
#include "actors/protocol/stage.hpp"
#include "sim/messages.hpp"
#include "sim/world.hpp"

namespace troupe::sim {
namespace {

using pipeline::Op;

constexpr std::size_t kCredits = 2;  // as the stage actor: receives per neighbour posted and unused

enum class Carries : uint64_t { activation, gradient };

uint64_t transfer_key(Carries what, int64_t step, int64_t micro) {
  return static_cast<uint64_t>(step) << 32 | static_cast<uint64_t>(what) << 28 | static_cast<uint64_t>(micro);
}

struct StageState {
  World* w = nullptr;
  int64_t rank = 0, chunk = 0, vs = 0;
  caf::actor collectives;
  caf::actor scheduler;
  int64_t step = -1;
  std::deque<stage_action> queue;
  std::set<int64_t> posted_ahead;
  std::map<int64_t, pipeline::Action> started;
  std::set<int64_t> batches, inputs_arrived, grads_arrived;
  std::set<int64_t> inputs_posted, grads_posted;  // receives posted and not used by their compute yet
  std::set<uint64_t> arrived;                     // transfers here before their receive was posted
  std::map<uint64_t, int64_t> waiting;            // posted receives by key: their action
  std::set<int64_t> outputs, input_grads;         // computed, to be sent
  std::map<int64_t, MemoryCharge> held;           // by micro-batch, forward to backward
  Nanos busy = 0;
  int64_t computing = 0;      // computes handed to the stream and not finished
  Nanos weights_started = 0;  // when the step's latest weight-gradient compute began
  bool reduced = false, norm_known = false;
  bool reduce_asked = false;        // the step's reduce_gradients reached, waiting on reductions
  int64_t reductions_left = 0;      // micro-batch reductions joined and not done
  int64_t backwards = 0;            // backwards handed to the stream and not finished
  int64_t backwards_done = 0;       // this step's that made weight gradients final
  std::map<int64_t, Nanos> agreeing;  // ZeRO-3: forwards comparing layer sequences, since when
  std::set<int64_t> agreed;           // and those whose ranks agreed
  int64_t tokens = 0;
  static inline const char* name = "sim_stage";

  const ChunkCost& cost() const { return w->costs.chunks[static_cast<std::size_t>(vs)]; }
  const pipeline::RankPlace& place() const { return w->places[static_cast<std::size_t>(rank)]; }
  bool first() const { return vs == 0; }
  bool last() const { return vs == w->costs.layout.virtual_stages() - 1; }
};
using SimStage = caf::stateful_actor<StageState>;

caf::actor me(SimStage* self) {
  return caf::actor_cast<caf::actor>(self);
}

void finish(SimStage* self, int64_t index) {
  auto& s = self->state;
  s.started.erase(index);
  self->send(s.scheduler, action_done{s.step, index});
}

// The world rank and chunk of virtual stage `v` in this rank's pipeline.
std::pair<int64_t, int64_t> holder(const StageState& s, int64_t v) {
  const pipeline::Layout& layout = s.w->costs.layout;
  const int64_t stage = layout.rank_of(v);
  return {s.place().pipeline[static_cast<std::size_t>(stage)], layout.chunk_of(v)};
}

void mark_arrived(StageState& s, Op op, int64_t micro) {
  (op == Op::recv_activation ? s.inputs_arrived : s.grads_arrived).insert(micro);
}

bool start_receive(SimStage* self, const stage_action& a) {
  auto& s = self->state;
  const bool activation = a.action.op == Op::recv_activation;
  const uint64_t key =
      transfer_key(activation ? Carries::activation : Carries::gradient, a.step, a.action.micro);
  s.started[a.index] = a.action;
  (activation ? s.inputs_posted : s.grads_posted).insert(a.action.micro);
  if (s.arrived.erase(key)) {
    mark_arrived(s, a.action.op, a.action.micro);
    finish(self, a.index);
  } else {
    s.waiting[key] = a.index;
  }
  return true;
}

bool start_send(SimStage* self, const stage_action& a) {
  auto& s = self->state;
  const bool activation = a.action.op == Op::send_activation;
  auto& ready = activation ? s.outputs : s.input_grads;
  if (!ready.erase(a.action.micro)) return false;  // its compute has not run yet
  s.started[a.index] = a.action;
  const auto [peer, peer_chunk] = holder(s, s.vs + (activation ? 1 : -1));
  const caf::actor target = s.w->chunks[static_cast<std::size_t>(peer)][static_cast<std::size_t>(peer_chunk)];
  const uint64_t key =
      transfer_key(activation ? Carries::activation : Carries::gradient, a.step, a.action.micro);
  if (peer == s.rank) {  // the neighbour chunk is on this rank: handed over, no link
    self->send(target, sim_arrival{key});
    finish(self, a.index);
    return true;
  }
  if (auto why = s.w->broken(s.rank, peer)) {
    s.w->fail_after_timeout(fmt::format("rank {} sending {} {} to rank {}: {}", s.rank,
                                        activation ? "activation" : "gradient", a.action.micro, peer, *why));
    return true;
  }
  const int64_t bytes = activation ? s.cost().boundary_bytes
                                   : s.w->costs.chunks[static_cast<std::size_t>(s.vs - 1)].boundary_bytes;
  const Nanos start = s.w->clock.now();
  const Nanos took = s.w->links.point_to_point(bytes, s.rank, peer);
  s.w->record(s.rank, Track::transfer, pipeline::describe(a.action), start, start + took);
  s.w->clock.after(took, [target, key, self = me(self), step = a.step, index = a.index] {
    caf::anon_send(target, sim_arrival{key});
    caf::anon_send(self, sim_sent{step, index});
  });
  return true;
}

void compute(SimStage* self, const stage_action& a, Nanos cost) {
  auto& s = self->state;
  s.started[a.index] = a.action;
  ++s.computing;
  if (a.action.op != Op::forward) ++s.backwards;
  World* w = s.w;
  const std::string label = pipeline::short_name(a.action, w->costs.layout.chunks > 1);
  // ZeRO-3: the pass's parameters are gathered by the progress thread meanwhile, which on a
  // CPU host takes its share of the cores from the computes.
  std::function<void()> gathers;
  if (w->costs.collective_demand > 0 && s.cost().prefetch > 0 && a.action.op != Op::backward_weight)
    gathers = [w, host = w->cluster.host_of(s.rank), work = s.cost().prefetch] {
      w->hosts[static_cast<std::size_t>(host)]->start(
          work, [] {}, w->costs.collective_demand);
    };
  w->streams[static_cast<std::size_t>(s.rank)]->enqueue(
      w->compute_cost(s.rank, cost), label,
      [self = me(self), a](Nanos start) {
        caf::anon_send(self, sim_computed{a.step, a.index, a.action.op, a.action.micro, start});
      },
      w->tracing ? &w->timeline : nullptr, s.rank, std::move(gathers));
  self->send(s.scheduler, compute_started{a.step, a.index});
}

bool reduces_each_micro_batch(const StageState& s);

// Without overlap_comm a ZeRO 2/3 backward waits for its gradients to be reduced before the
// compute thread goes on, so nothing is queued behind a backward until its reduction is done.
bool held_by_reduction(const StageState& s) {
  return !s.w->job.zero.overlap_comm && reduces_each_micro_batch(s) &&
         (s.backwards > 0 || s.reductions_left > 0);
}

bool sequence_agreed(SimStage* self, int64_t micro);

bool start_forward(SimStage* self, const stage_action& a) {
  auto& s = self->state;
  const int64_t m = a.action.micro;
  if ((s.first() || s.last()) && !s.batches.count(m)) return false;
  if (!s.first() && !s.inputs_arrived.count(m)) return false;
  if (held_by_reduction(s)) return false;
  if (!sequence_agreed(self, m)) return false;
  s.batches.erase(m);
  s.inputs_arrived.erase(m);
  s.inputs_posted.erase(m);
  compute(self, a, s.cost().forward);
  return true;
}

bool start_backward(SimStage* self, const stage_action& a) {
  auto& s = self->state;
  const int64_t m = a.action.micro;
  const Op op = a.action.op;
  if (op != Op::backward_weight && !s.last() && !s.grads_arrived.count(m)) return false;
  if (held_by_reduction(s)) return false;
  s.grads_arrived.erase(m);
  s.grads_posted.erase(m);
  const ChunkCost& c = s.cost();
  compute(self, a,
          op == Op::backward         ? c.backward
          : op == Op::backward_input ? c.backward_input
                                     : c.backward_weight);
  return true;
}

void answer_gradients(SimStage* self) {
  auto& s = self->state;
  s.reduced = true;
  const JobConfig& job = s.w->job;
  const double busy_s = static_cast<double>(s.busy) / 1e9;
  gradients_ready g{s.step, 0, 0, busy_s, 0};
  if (job.parallel.pp > 1) {  // shares, summed over the world by the scheduler (actors/stage.cpp)
    g.tokens = s.last() && s.place().shard == 0 ? s.tokens : 0;
    g.busy_s = busy_s / static_cast<double>(job.parallel.dp * job.parallel.tp);
  } else {
    g.tokens = s.tokens * job.parallel.dp;
  }
  self->send(s.scheduler, g);
}

// A collective's key: the same on every member, different for each collective of a step.
// `micro` + 1 tells a micro-batch's reduction from the step's (0).
uint64_t group_key(int64_t step, GroupOp op, int64_t micro, int64_t vs, int64_t shard) {
  return static_cast<uint64_t>(step) << 44 | static_cast<uint64_t>(op) << 40 |
         static_cast<uint64_t>(micro + 1) << 24 | static_cast<uint64_t>(vs) << 12 |
         static_cast<uint64_t>(shard);
}

GroupOp op_of(uint64_t key) {
  return static_cast<GroupOp>((key >> 40) & 0xf);
}

// The micro-batch a key names; -1 for the step's collectives.
int64_t micro_of(uint64_t key) {
  return static_cast<int64_t>((key >> 24) & 0xffff) - 1;
}

// The data-parallel group's collective on this chunk's share of its stage; `beside_compute`
// where passes of the step are still to run here.
void join(SimStage* self, GroupOp op, int64_t bytes, Nanos earliest, double tail, const std::string& what,
          int64_t micro = -1, bool beside_compute = false) {
  auto& s = self->state;
  const uint64_t key = group_key(s.step, op, micro, s.vs, s.place().shard);
  group_join j{key,
               s.rank,
               s.place().data_parallel_group,
               op,
               bytes,
               earliest,
               tail,
               fmt::format("{} (virtual stage {})", what, s.vs),
               me(self)};
  j.beside_compute = beside_compute;
  self->send(s.collectives, std::move(j));
}

const StageCost& stage_cost(const StageState& s) {
  return s.w->costs.stages[static_cast<std::size_t>(s.place().stage)];
}

// This chunk's part of its stage's per-step figures.
double chunk_share(const StageState& s) {
  const StageCost& stage = stage_cost(s);
  return stage.parameters > 0
             ? static_cast<double>(s.cost().parameters) / static_cast<double>(stage.parameters)
             : 1;
}

// ZeRO 2 and 3 keep no full gradient: every micro-batch's is reduce-scattered as its
// backward makes it final (DESIGN.md, "Stage 2 keeps no full gradient"); 0 and 1 reduce the
// accumulated gradients once a step.
bool reduces_each_micro_batch(const StageState& s) {
  const JobConfig& job = s.w->job;
  return job.zero.policy().reduces_every_micro_batch() && job.parallel.dp > 1 &&
         stage_cost(s).reduce_bytes > 0;
}

// Gradients made final by a backward that began at `backward_started` go to the group in rows
// of at most reduce_bucket_size elements (memory/zero_plan.hpp), each as soon as it is final:
// with overlap the reduction may start with that backward and ends no sooner than its last
// row's share after it. `micro` is the micro-batch's (-1: the step's accumulated gradients).
void join_reduction(SimStage* self, Nanos backward_started, int64_t micro) {
  auto& s = self->state;
  const StageCost& stage = stage_cost(s);
  const JobConfig& job = s.w->job;
  const auto bytes = static_cast<int64_t>(static_cast<double>(stage.reduce_bytes) * chunk_share(s));
  const double elements = static_cast<double>(stage.parameters) * chunk_share(s);
  const Nanos earliest = job.zero.overlap_comm ? backward_started : s.w->clock.now();
  const double tail =
      job.zero.overlap_comm
          ? std::min(1.0, static_cast<double>(job.zero.reduce_bucket_size) / std::max(1.0, elements))
          : 1.0;
  // A micro-batch's runs beside the passes still to come (the next forward first).
  const bool beside = micro >= 0 && s.backwards_done < s.w->job.batch.gradient_accumulation_steps;
  join(self, stage.scatter ? GroupOp::reduce_scatter : GroupOp::all_reduce, bytes, earliest, tail,
       micro < 0 ? std::string("gradient reduction")
                 : fmt::format("gradient reduction of micro-batch {}", micro),
       micro, beside);
}

// Once the step's backwards have run: the step's reduction, or the wait for the micro-batches'.
bool reduce(SimStage* self, const stage_action& a) {
  auto& s = self->state;
  if (s.computing > 0) return false;
  s.started[a.index] = a.action;
  if (s.w->job.parallel.dp == 1 || stage_cost(s).reduce_bytes == 0) {
    answer_gradients(self);
  } else if (reduces_each_micro_batch(s)) {
    s.reduce_asked = true;
    if (s.reductions_left == 0) answer_gradients(self);
  } else {
    join_reduction(self, s.weights_started, -1);
  }
  return true;
}

// A backward's gradients are final: ZeRO 2 and 3 reduce them now. Without overlap_comm the
// backward waits for its rows to be reduced, so no compute runs until they are.
void reduce_micro_batch(SimStage* self, const sim_computed& c) {
  auto& s = self->state;
  if (!reduces_each_micro_batch(s)) return;
  ++s.reductions_left;
  join_reduction(self, c.start, c.micro);
}

// ZeRO-3's ranks agree on the layers a forward is about to run before it gathers any
// (DESIGN.md, "Ranks agree on the layer sequence"): an all-gather of a digest, which the
// compute thread waits for inside the forward, so the wait counts as its busy time.
constexpr int64_t kDigestBytes = 32;  // step, micro-batch, length and digest, per rank

bool sequence_agreed(SimStage* self, int64_t micro) {
  auto& s = self->state;
  if (!s.w->job.zero.policy().gathers_before_use() || s.w->job.parallel.dp == 1 || s.agreed.count(micro))
    return true;
  if (s.computing > 0) return false;  // the compute thread compares once it is free
  if (s.agreeing.emplace(micro, s.w->clock.now()).second)
    join(self, GroupOp::all_gather, kDigestBytes * s.w->job.parallel.dp, s.w->clock.now(), 1.0,
         fmt::format("layer sequence of micro-batch {}", micro), micro);
  return false;
}

void on_reduced(SimStage* self, uint64_t key) {
  auto& s = self->state;
  if (micro_of(key) < 0) return answer_gradients(self);
  --s.reductions_left;
  if (s.reduce_asked && s.reductions_left == 0) answer_gradients(self);
}

void applied(SimStage* self) {
  auto& s = self->state;
  const MemoryBytes peak = s.w->ledgers[static_cast<std::size_t>(s.rank)]->peak();
  StepStats stats;
  stats.model_state_bytes = peak.model_state();
  stats.parameter_bytes = peak[MemoryKind::parameters];
  stats.gradient_bytes = peak[MemoryKind::gradients];
  stats.optimizer_state_bytes = peak[MemoryKind::optimizer_state];
  stats.communication_bytes = peak[MemoryKind::communication];
  stats.activation_bytes = peak[MemoryKind::activations];
  stats.lr = s.w->job.optimizer.lr;
  // This rank's own: the simulation averages the ranks' bubbles over each stage itself.
  stats.busy_s = static_cast<double>(s.busy) / 1e9;
  self->send(s.scheduler, step_applied{s.step, stats});
}

bool update(SimStage* self, const stage_action& a) {
  auto& s = self->state;
  if (!s.reduced || (s.w->job.parallel.pp > 1 && !s.norm_known)) return false;
  s.started[a.index] = a.action;
  const StageCost& stage = stage_cost(s);
  const auto cost =
      static_cast<Nanos>(static_cast<double>(std::max(stage.optimizer, stage.swap)) * chunk_share(s));
  World* w = s.w;
  w->streams[static_cast<std::size_t>(s.rank)]->enqueue(
      w->compute_cost(s.rank, cost), "optimizer",
      [self = me(self), step = a.step, index = a.index](Nanos start) {
        caf::anon_send(self, sim_computed{step, index, Op::optimizer_step, -1, start});
      },
      w->tracing ? &w->timeline : nullptr, s.rank);
  return true;
}

bool try_start(SimStage* self, const stage_action& a) {
  auto& s = self->state;
  switch (a.action.op) {
    case Op::load:
      s.batches.insert(a.action.micro);
      if (s.last()) s.tokens += s.w->costs.micro_tokens;
      self->send(s.scheduler, action_done{a.step, a.index});
      return true;
    case Op::recv_activation:
    case Op::recv_gradient:
      return start_receive(self, a);
    case Op::send_activation:
    case Op::send_gradient:
      return start_send(self, a);
    case Op::forward:
      return start_forward(self, a);
    case Op::backward:
    case Op::backward_input:
    case Op::backward_weight:
      return start_backward(self, a);
    case Op::reduce_gradients:
      return reduce(self, a);
    case Op::optimizer_step:
      return update(self, a);
  }
  return false;
}

void post_receives_ahead(SimStage* self) {
  auto& s = self->state;
  bool activations = true, gradients = true;
  for (const stage_action& a : s.queue) {
    if (!activations && !gradients) return;
    const Op op = a.action.op;
    if (op != Op::recv_activation && op != Op::recv_gradient) continue;
    bool& posting = op == Op::recv_activation ? activations : gradients;
    if (!posting || s.posted_ahead.count(a.index)) continue;
    const auto& posted = op == Op::recv_activation ? s.inputs_posted : s.grads_posted;
    if (posted.size() >= kCredits) {
      posting = false;
      continue;
    }
    start_receive(self, a);
    s.posted_ahead.insert(a.index);
  }
}

void pump(SimStage* self) {
  auto& s = self->state;
  if (s.w->dead(s.rank)) return;
  while (!s.queue.empty()) {
    const stage_action& head = s.queue.front();
    if (!s.posted_ahead.erase(head.index) && !try_start(self, head)) break;
    s.queue.pop_front();
  }
  post_receives_ahead(self);
  auto& waiting = s.w->waiting_at[static_cast<std::size_t>(s.rank)][static_cast<std::size_t>(s.chunk)];
  if (s.queue.empty())
    waiting.reset();
  else
    waiting = s.queue.front().action;
}

void begin_step(StageState& s, int64_t step) {
  s.step = step;
  s.busy = 0;
  s.tokens = 0;
  s.reduced = s.norm_known = s.reduce_asked = false;
  s.backwards_done = 0;
  s.weights_started = s.w->clock.now();
}

void on_computed(SimStage* self, const sim_computed& c) {
  auto& s = self->state;
  if (c.step != s.step) return;
  const Nanos now = s.w->clock.now();
  if (c.op == Op::optimizer_step) {
    const StageCost& stage = stage_cost(s);
    if (s.w->job.parallel.dp > 1 && stage.gather_bytes > 0)
      return join(self, GroupOp::all_gather,
                  static_cast<int64_t>(static_cast<double>(stage.gather_bytes) * chunk_share(s)), now, 1.0,
                  "parameter gather");
    return applied(self);
  }
  --s.computing;
  if (c.op != Op::forward) --s.backwards;
  Nanos began = c.start;
  if (c.op == Op::forward && s.agreeing.count(c.micro)) {  // its thread waited from then
    began = std::min(began, s.agreeing[c.micro]);
    s.agreeing.erase(c.micro);
    s.agreed.erase(c.micro);
  }
  s.busy += now - began;
  RankFigures& figures = s.w->figures[static_cast<std::size_t>(s.rank)];
  figures.busy += now - began;
  figures.exposed += c.op == Op::forward           ? s.cost().exposed_forward
                     : c.op == Op::backward_weight ? 0
                                                   : s.cost().exposed_backward;
  auto ledger = s.w->ledgers[static_cast<std::size_t>(s.rank)];
  if (c.op == Op::forward) {
    s.held[c.micro] =
        MemoryCharge(ledger, MemoryKind::activations, s.cost().held_bytes + s.cost().saved_bytes);
    if (!s.last()) s.outputs.insert(c.micro);
  } else {
    if (c.op == Op::backward || c.op == Op::backward_weight) {
      s.held.erase(c.micro);
      s.weights_started = std::max(s.weights_started, c.start);
      ++s.backwards_done;
      reduce_micro_batch(self, c);
    }
    if (c.op != Op::backward_weight && !s.first()) s.input_grads.insert(c.micro);
  }
  finish(self, c.index);
}

caf::behavior sim_stage(SimStage* self, World* world, int64_t rank, int64_t chunk, caf::actor collectives) {
  auto& s = self->state;
  s.w = world;
  s.rank = rank;
  s.chunk = chunk;
  s.vs = world->costs.layout.virtual_stage(world->places[static_cast<std::size_t>(rank)].stage, chunk);
  s.collectives = std::move(collectives);
  return {
      [=](stage_action& a) {
        auto& st = self->state;
        st.scheduler = caf::actor_cast<caf::actor>(self->current_sender());
        if (a.step != st.step) begin_step(st, a.step);
        st.queue.push_back(std::move(a));
        pump(self);
      },
      [=](const sim_arrival& arrival) {
        auto& st = self->state;
        auto waiting = st.waiting.find(arrival.key);
        if (waiting == st.waiting.end()) {
          st.arrived.insert(arrival.key);
          return;
        }
        const int64_t index = waiting->second;
        st.waiting.erase(waiting);
        auto started = st.started.find(index);
        if (started != st.started.end()) mark_arrived(st, started->second.op, started->second.micro);
        finish(self, index);
        pump(self);
      },
      [=](const sim_sent& sent) {
        if (sent.step != self->state.step) return;
        finish(self, sent.index);
        pump(self);
      },
      [=](const sim_computed& c) {
        if (self->state.w->dead(self->state.rank)) return;
        on_computed(self, c);
        pump(self);
      },
      [=](const gradients_summed& g) {
        if (g.step != self->state.step) return;
        self->state.norm_known = true;
        pump(self);
      },
      [=](const group_done& done) {
        if (op_of(done.key) == GroupOp::all_gather) {
          const int64_t micro = micro_of(done.key);
          if (micro < 0) return applied(self);
          self->state.agreed.insert(micro);  // the layer sequence compared
          return pump(self);
        }
        on_reduced(self, done.key);
        pump(self);
      },
  };
}

}  // namespace

caf::actor spawn_sim_stage(caf::actor_system& system, World& world, int64_t rank, int64_t chunk,
                           caf::actor collectives) {
  return system.spawn(sim_stage, &world, rank, chunk, std::move(collectives));
}

}  // namespace troupe::sim
