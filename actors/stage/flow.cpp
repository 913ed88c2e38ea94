// The stage's actions (protocol/pipeline.hpp): taken in program order, each started once
// what it needs is there — a forward its micro-batch or the previous stage's activation,
// a backward the next stage's gradient, a send the output it sends. Receives are posted
// as soon as they are reached, so they wait in the transport while compute runs, and
// sends go out as soon as their compute has run; neither holds up the next action.
//
// Between stages travel float32 tensors, the payload's bytes alone: the shape of the
// activations crosses once, as a header before the first payload, and both sides keep it
// (the gradient coming back has the shape of the activation that went). Each transfer is
// keyed by what it carries, the stage receiving it, the micro-batch and the step, so a
// table may order a stage's receives differently from its neighbour's sends.
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/stage/state.hpp"

namespace troupe::stage {
namespace {

using pipeline::Op;

constexpr int64_t kHeaderMagic = 0x7472'6f75'7065'0001;  // "troupe", version 1
constexpr std::size_t kHeaderFields = 8;                 // magic, rank count, up to 6 sizes
constexpr std::size_t kMaxDims = kHeaderFields - 2;
constexpr std::size_t kCredits = 2;  // receive buffers per neighbour posted and not yet used

caf::actor me(StageActor* self) {
  return caf::actor_cast<caf::actor>(self);
}

std::size_t element_count(const std::vector<int64_t>& shape) {
  std::size_t n = 1;
  for (int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

// What a transfer between stages carries; with the receiving stage, the micro-batch and
// the step it is the transfer's key (Transport::send_keyed), so transfers match by what
// they are, in whatever order a schedule posts them.
enum class Carries : uint64_t { activation, gradient, header, eval_activation };

// A validation pass's activations travel under keys of their own (its step is the batch).
Carries activation_of(const stage_action& a) {
  return a.eval ? Carries::eval_activation : Carries::activation;
}

uint64_t transfer_key(Carries what, int64_t step, int64_t receiving_stage, int64_t micro) {
  return (static_cast<uint64_t>(step) & 0xff) << 32 | static_cast<uint64_t>(what) << 30 |
         (static_cast<uint64_t>(receiving_stage) & 0x3ff) << 20 | (static_cast<uint64_t>(micro) & 0xfffff);
}

// Values of `type` (headers: int64 fields, moved as fp32 pairs).
void send_bytes(StageActor* self, Tag kind, int64_t index, std::shared_ptr<HostBuffer> buffer, int64_t peer,
                uint64_t key, DataType type = DataType::f32) {
  std::size_t count = buffer->bytes() / element_bytes(type);
  self->send(self->state.options.comm_agent,
             send_request{tag(kind, static_cast<uint64_t>(index)),
                          typed_span(std::move(buffer), 0, count, type), peer, me(self), key});
}

void receive_bytes(StageActor* self, Tag kind, int64_t index, std::shared_ptr<HostBuffer> buffer,
                   int64_t peer, uint64_t key, DataType type = DataType::f32,
                   std::shared_ptr<ReceiveArrival> arrival = nullptr) {
  std::size_t count = buffer->bytes() / element_bytes(type);
  self->send(self->state.options.comm_agent, recv_request{tag(kind, static_cast<uint64_t>(index)),
                                                          typed_span(std::move(buffer), 0, count, type), peer,
                                                          me(self), key, std::move(arrival)});
}

std::shared_ptr<HostBuffer> header_of(const std::vector<int64_t>& shape) {
  auto header = std::make_shared<HostBuffer>(kHeaderFields * sizeof(int64_t));
  int64_t* field = header->as<int64_t>();
  field[0] = kHeaderMagic;
  field[1] = static_cast<int64_t>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) field[2 + d] = shape[d];
  return header;
}

Result<std::vector<int64_t>> shape_of_header(const HostBuffer& header) {
  const int64_t* field = header.as<int64_t>();
  if (field[0] != kHeaderMagic || field[1] < 1 || field[1] > static_cast<int64_t>(kMaxDims))
    return make_error("the previous stage's activation header is not troupe's");
  std::vector<int64_t> shape(field + 2, field + 2 + field[1]);
  for (int64_t d : shape)
    if (d < 1 || d > (int64_t{1} << 40))
      return make_error(fmt::format("the previous stage sent shape [{}]", fmt::join(shape, ", ")));
  return shape;
}

void start(StageActor* self, const stage_action& a) {
  self->state.flow.started[a.index] = a.action;
}

// The started action of kind `op` on micro-batch `micro`: its index, or -1.
int64_t started_index(const Flow& f, Op op, int64_t micro) {
  for (const auto& [index, action] : f.started)
    if (action.op == op && action.micro == micro) return index;
  return -1;
}

// Action `index` has finished: the scheduler hears of it.
void finish(StageActor* self, int64_t index) {
  Flow& f = self->state.flow;
  f.started.erase(index);
  self->send(f.scheduler, action_done{f.evaluating ? f.eval_batch : f.step, index});
}

// The receive of `m` still under way from another rank, taken for a compute queued now;
// null when its bytes are in. False: neither (not posted yet, or from a chunk of this rank,
// whose buffer comes with its message).
bool take_arrival(std::map<int64_t, std::shared_ptr<ReceiveArrival>>& pending, const std::set<int64_t>& in,
                  int64_t m, std::shared_ptr<ReceiveArrival>& arrival) {
  auto found = pending.find(m);
  if (in.count(m)) {
    if (found != pending.end()) pending.erase(found);
    return true;
  }
  if (found == pending.end()) return false;
  arrival = std::move(found->second);
  pending.erase(found);
  return true;
}

std::string wait_label(const char* what, const stage_action& a) {
  return fmt::format("{} {}.{}.{}", what, a.step, a.action.micro, a.action.chunk);
}

// A forward goes on the stream once its micro-batch is loaded and its input is here or on
// its way from another rank: then it waits on the stream, and starts as the transport
// completes the receive, with no hop through this actor.
bool start_forward(StageActor* self, const stage_action& a) {
  auto& s = self->state;
  Flow& f = s.flow;
  const int64_t m = a.action.micro;
  if ((s.first_stage() || s.last_stage()) && !f.batches.count(m)) return false;
  std::shared_ptr<ReceiveArrival> arrival;
  if (!s.first_stage() && !take_arrival(f.input_arrivals, f.inputs_arrived, m, arrival)) return false;
  ForwardWork w{a.step, m, a.micro_count, nullptr, nullptr, f.input_shape, arrival, a.eval};
  if (auto batch = f.batches.find(m); batch != f.batches.end()) w.batch = batch->second;
  if (!s.first_stage()) w.input = f.inputs[m];
  f.batches.erase(m);
  f.inputs.erase(m);
  f.inputs_arrived.erase(m);
  start(self, a);
  if (arrival) queue_wait(s, std::move(arrival), wait_label("activation", a));
  s.compute->enqueue(
      fmt::format("forward {}.{}.{}", a.step, m, a.action.chunk),
      [&s, c = s.compute_side, w = std::move(w), self = me(self)] { run_forward(s, *c, w, self); });
  self->send(f.scheduler, compute_started{a.step, a.index});
  return true;
}

// A whole backward or its input half: once the next stage's gradient is here. A weight
// half needs nothing from outside: it follows its input half on the same stream.
bool start_backward(StageActor* self, const stage_action& a) {
  auto& s = self->state;
  Flow& f = s.flow;
  const int64_t m = a.action.micro;
  const bool weights = a.action.op == Op::backward_weight;
  std::shared_ptr<ReceiveArrival> arrival;
  if (!weights && !s.last_stage() && !take_arrival(f.gradient_arrivals, f.output_grads_arrived, m, arrival))
    return false;
  BackwardWork w{a.action.op, a.step, m, a.micro_count, nullptr, f.output_shape, arrival, 1.0};
  // Each replica backpropagates its share of the step's loss (1/dp of the mean) and the
  // replicas' gradients are summed: every partial sum of a gradient is then as large as in
  // the single-process trainer's accumulation, so fp16 overflows where it overflows (a
  // sum of per-replica means, averaged after, is dp times larger before the division).
  w.loss_seed = (s.scaler ? s.scaler->scale() : 1.0) / static_cast<double>(s.options.dp);
  if (s.options.inject_overflow_steps.count(a.step + 1))
    w.loss_seed = std::numeric_limits<double>::infinity();
  if (!weights && !s.last_stage()) w.output_gradient = f.output_grads[m];
  f.output_grads.erase(m);
  f.output_grads_arrived.erase(m);
  start(self, a);
  if (arrival) queue_wait(s, std::move(arrival), wait_label("gradient", a));
  s.compute->enqueue(
      fmt::format("{} {}.{}.{}", pipeline::op_name(a.action.op), a.step, m, a.action.chunk),
      [&s, c = s.compute_side, w = std::move(w), self = me(self)] { run_backward(s, *c, w, self); });
  self->send(f.scheduler, compute_started{a.step, a.index});
  return true;
}

// Whether the stage before (or after) this one is a chunk of this rank (virtual stages):
// then transfers go between the two actors as local_transfer messages, by the same keys.
bool local_peer(const StageState& s, bool previous) {
  return (previous ? s.options.place.previous : s.options.place.next) == s.options.place.world_rank;
}

// A transfer from a chunk of this rank has arrived for receive action `index`.
void take_local(StageActor* self, int64_t index, const pipeline::Action& action, local_transfer& t) {
  Flow& f = self->state.flow;
  const bool activation = action.op == Op::recv_activation;
  if (activation && f.input_shape.empty()) f.input_shape = t.shape;
  (activation ? f.inputs : f.output_grads)[action.micro] = std::move(t.buffer);
  (activation ? f.inputs_arrived : f.output_grads_arrived).insert(action.micro);
  finish(self, index);
}

bool start_local_receive(StageActor* self, const stage_action& a, bool activation) {
  Flow& f = self->state.flow;
  const uint64_t key = transfer_key(activation ? activation_of(a) : Carries::gradient, a.step,
                                    self->state.options.place.stage, a.action.micro);
  start(self, a);
  auto arrived = f.local_arrived.find(key);
  if (arrived == f.local_arrived.end()) {
    f.local_waiting[key] = a.index;
    return true;
  }
  take_local(self, a.index, a.action, arrived->second);
  f.local_arrived.erase(arrived);
  return true;
}

bool start_receive(StageActor* self, const stage_action& a) {
  auto& s = self->state;
  Flow& f = s.flow;
  const int64_t m = a.action.micro;
  const bool activation = a.action.op == Op::recv_activation;
  if (local_peer(s, activation)) return start_local_receive(self, a, activation);
  if (activation && f.input_shape.empty()) {  // the first from the previous stage: its shape first
    if (!f.header_posted) {
      f.header_posted = true;
      f.header_in = std::make_shared<HostBuffer>(kHeaderFields * sizeof(int64_t));
      receive_bytes(self, Tag::header_received, a.index, f.header_in, s.options.place.previous,
                    transfer_key(Carries::header, a.step, s.options.place.stage, 0));
    }
    return false;
  }
  if (!activation && f.output_shape.empty()) return false;  // known once the first forward has run
  const auto& shape = activation ? f.input_shape : f.output_shape;
  auto buffer = std::make_shared<HostBuffer>(element_count(shape) * element_bytes(s.options.dtype));
  (activation ? f.inputs : f.output_grads)[m] = buffer;
  start(self, a);
  const int64_t stage = s.options.place.stage;
  auto arrival = std::make_shared<ReceiveArrival>();
  (activation ? f.input_arrivals : f.gradient_arrivals)[m] = arrival;
  receive_bytes(self, Tag::received, a.index, std::move(buffer),
                activation ? s.options.place.previous : s.options.place.next,
                transfer_key(activation ? activation_of(a) : Carries::gradient, a.step, stage, m),
                s.options.dtype, std::move(arrival));
  return true;
}

bool start_send(StageActor* self, const stage_action& a) {
  auto& s = self->state;
  Flow& f = s.flow;
  const bool activation = a.action.op == Op::send_activation;
  auto& pending = activation ? f.outputs : f.input_grads;
  auto found = pending.find(a.action.micro);
  if (found == pending.end()) return false;  // its compute has not run yet
  const int64_t peer = activation ? s.options.place.next : s.options.place.previous;
  const int64_t receiver = s.options.place.stage + (activation ? 1 : -1);
  const uint64_t key =
      transfer_key(activation ? activation_of(a) : Carries::gradient, a.step, receiver, a.action.micro);
  if (local_peer(s, !activation)) {  // the buffer is the neighbour chunk's from here on
    start(self, a);
    self->send(activation ? f.local_next : f.local_previous,
               local_transfer{key, found->second, activation ? f.output_shape : f.input_shape});
    pending.erase(found);
    finish(self, a.index);
    return true;
  }
  if (activation && !f.header_sent) {
    f.header_sent = true;
    send_bytes(self, Tag::header_sent, a.index, header_of(f.output_shape), peer,
               transfer_key(Carries::header, a.step, receiver, 0));
  }
  start(self, a);
  send_bytes(self, Tag::sent, a.index, found->second, peer, key, s.options.dtype);
  pending.erase(found);
  return true;
}

// Whether `a` could start; if so it has. False leaves it first in the queue.
bool try_start(StageActor* self, const stage_action& a) {
  auto& s = self->state;
  Flow& f = s.flow;
  switch (a.action.op) {
    case Op::load:
      f.batches[a.action.micro] = a.batch;
      if (s.last_stage() && a.batch && !a.eval) f.tokens += a.batch->target.numel();
      self->send(f.scheduler, action_done{a.step, a.index});
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
      // Reduction began as backward made each row final; the answer comes with the norm.
      start(self, a);
      if (s.progress.answer_ready) answer_gradients_ready(self);
      return true;
    case Op::optimizer_step:
      if (!s.progress.norm_known) return false;
      start(self, a);
      apply_update(self);
      return true;
  }
  return false;
}

}  // namespace

void accept_action(StageActor* self, stage_action action) {
  auto& s = self->state;
  s.flow.scheduler = caf::actor_cast<caf::actor>(self->current_sender());
  if (s.failed || !s.owner) {
    self->send(s.flow.scheduler, stage_failed{s.failure});
    return;
  }
  if (action.eval) {
    if (!s.flow.evaluating || s.flow.eval_batch != action.step) {
      s.flow.evaluating = true;
      s.flow.eval_batch = action.step;
      s.flow.eval_loss_sum = 0;
      s.flow.eval_count = 0;
    }
  } else if (s.flow.evaluating) {
    s.flow.evaluating = false;
  }
  if (!action.eval && action.step != s.flow.step) {
    s.flow.step = action.step;
    s.flow.micro_count = action.micro_count;
    s.flow.tokens = 0;
    s.flow.busy_s = 0;
    begin_step(self, action.step, action.micro_count);
  }
  s.flow.queue.push_back(std::move(action));
  pump(self);
}

// Receives further down the queue are posted ahead of their turn, in program order per
// neighbour, while fewer than kCredits buffers from that neighbour wait to be used: the
// transfer then runs while this stage computes, and no stage runs unboundedly ahead.
void post_receives_ahead(StageActor* self) {
  Flow& f = self->state.flow;
  bool activations = true, gradients = true;  // still posting this kind, in order
  for (const stage_action& a : f.queue) {
    if (!activations && !gradients) return;
    const Op op = a.action.op;
    bool& posting = op == Op::recv_activation ? activations : gradients;
    if ((op != Op::recv_activation && op != Op::recv_gradient) || !posting) continue;
    if (f.posted_ahead.count(a.index)) continue;
    const auto& waiting = op == Op::recv_activation ? f.inputs : f.output_grads;
    if (waiting.size() >= kCredits || !start_receive(self, a))
      posting = false;
    else
      f.posted_ahead.insert(a.index);
  }
}

void pump(StageActor* self) {
  auto& q = self->state.flow.queue;
  Flow& f = self->state.flow;
  while (!q.empty() && !self->state.failed) {
    const stage_action& head = q.front();
    if (!f.posted_ahead.erase(head.index) && !try_start(self, head)) break;
    q.pop_front();
  }
  if (!self->state.failed) post_receives_ahead(self);
}

void on_transfer_done(StageActor* self, const collective_done& done) {
  auto& s = self->state;
  Flow& f = s.flow;
  const auto index = static_cast<int64_t>(row_of(done.tag));
  const Tag kind = kind_of(done.tag);
  if (!done.error.empty()) {
    // Activations come from the previous stage and gradients go back to it.
    auto started = f.started.find(index);
    const bool previous = kind == Tag::header_received ||
                          (started != f.started.end() && (started->second.op == Op::recv_activation ||
                                                          started->second.op == Op::send_gradient));
    const bool sending = kind == Tag::sent || kind == Tag::header_sent;
    return fail(self, fmt::format("{} stage {} (rank {}) failed: {}", sending ? "sending to" : "receiving from",
                                  s.options.place.stage + (previous ? -1 : 1),
                                  previous ? s.options.place.previous : s.options.place.next, done.error));
  }
  if (kind == Tag::header_sent) return;
  if (kind == Tag::header_received) {
    auto shape = shape_of_header(*f.header_in);
    if (!shape) return fail(self, shape.error().message);
    f.input_shape = std::move(*shape);
    return pump(self);
  }
  auto found = f.started.find(index);
  if (found == f.started.end()) return;
  // Arrived for a compute not queued yet (one queued already took its buffer and waits).
  const int64_t m = found->second.micro;
  if (found->second.op == Op::recv_activation && f.inputs.count(m)) {
    f.inputs_arrived.insert(m);
    f.input_arrivals.erase(m);
  }
  if (found->second.op == Op::recv_gradient && f.output_grads.count(m)) {
    f.output_grads_arrived.insert(m);
    f.gradient_arrivals.erase(m);
  }
  finish(self, index);
  pump(self);
}

void on_local_transfer(StageActor* self, local_transfer& t) {
  Flow& f = self->state.flow;
  if (self->state.failed) return;
  auto waiting = f.local_waiting.find(t.key);
  if (waiting == f.local_waiting.end()) {
    f.local_arrived[t.key] = std::move(t);
    return;
  }
  const int64_t index = waiting->second;
  f.local_waiting.erase(waiting);
  auto started = f.started.find(index);
  if (started == f.started.end()) return;
  const pipeline::Action action = started->second;
  take_local(self, index, action, t);
  pump(self);
}

void on_forward_computed(StageActor* self, forward_computed& computed) {
  auto& s = self->state;
  Flow& f = s.flow;
  if (s.failed || computed.step != (f.evaluating ? f.eval_batch : f.step)) return;
  if (f.evaluating && s.last_stage()) {
    f.eval_loss_sum += computed.eval_loss;
    ++f.eval_count;
  } else {
    f.busy_s += computed.seconds;
  }
  if (computed.output) {
    if (f.output_shape.empty()) {
      if (computed.shape.empty() || computed.shape.size() > kMaxDims)
        return fail(self, fmt::format("stage {}'s output has {} dimensions; between stages troupe moves "
                                      "tensors of 1 to {}",
                                      s.options.place.stage, computed.shape.size(), kMaxDims));
      f.output_shape = computed.shape;
    } else if (computed.shape != f.output_shape) {
      return fail(self, fmt::format("stage {}'s output of micro-batch {} has shape [{}] but earlier ones had "
                                    "[{}]: the pipeline keeps one activation shape per stage boundary",
                                    s.options.place.stage, computed.micro, fmt::join(computed.shape, ", "),
                                    fmt::join(f.output_shape, ", ")));
    }
    f.outputs[computed.micro] = std::move(computed.output);
  }
  if (int64_t index = started_index(f, Op::forward, computed.micro); index >= 0) finish(self, index);
  pump(self);
}

void on_backward_computed(StageActor* self, backward_computed& computed) {
  auto& s = self->state;
  Flow& f = s.flow;
  if (s.failed || computed.step != f.step) return;
  f.busy_s += computed.seconds;
  if (computed.input_gradient) f.input_grads[computed.micro] = std::move(computed.input_gradient);
  if (int64_t index = started_index(f, computed.op, computed.micro); index >= 0) finish(self, index);
  pump(self);
}

void answer_gradients_ready(StageActor* self) {
  auto& s = self->state;
  Flow& f = s.flow;
  int64_t index = started_index(f, Op::reduce_gradients, -1);
  if (index < 0) return;  // not reached yet: answered when it is
  f.started.erase(index);
  self->send(f.scheduler, s.progress.answer);
}

}  // namespace troupe::stage
