// The stage's work items on its compute stream: a micro-batch's forward through the
// stage's layers (ending in the loss on the last stage) and its backward. Each takes what
// it needs by value, keeps what the backward needs in the ComputeSide, and answers with a
// message; the bytes that cross to a neighbour are copied into a buffer of their own.
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/stage/state.hpp"
#include "actors/zero/parameter_fetcher.hpp"

namespace troupe::stage {
namespace {

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

torch::Device device_of(const StageState& s) {
  return s.options.device ? s.options.device->device : torch::Device(torch::kCPU);
}

// A tensor's values in a buffer of their own, as the stage's dtype (what travels to a
// neighbour: activations and their gradients move in the precision the model computes in).
std::shared_ptr<HostBuffer> bytes_of(const torch::Tensor& t, DataType type) {
  torch::Tensor host = t.detach().to(torch::kCPU).to(scalar_type_of(type)).contiguous();
  auto buffer = std::make_shared<HostBuffer>(static_cast<std::size_t>(host.numel()) * element_bytes(type));
  std::memcpy(buffer->data(), host.data_ptr(), buffer->bytes());
  return buffer;
}

// A received buffer as a tensor on the stage's device (the buffer outlives the view).
torch::Tensor tensor_of(const std::shared_ptr<HostBuffer>& buffer, const std::vector<int64_t>& shape,
                        torch::Device device, DataType type) {
  torch::Tensor view = torch::from_blob(
      buffer->data(), shape, [keep = buffer](void*) {}, scalar_type_of(type));
  return device.is_cpu() ? view : view.to(device);
}

// Stage 3's passes (FetchPlanner): with one stage a micro-batch's backward follows its
// forward, and rows gathered at the end of the forward serve the start of the backward.
// A pipeline runs other micro-batches' work in between, so each forward and each
// backward (with its recomputed forward, when checkpointing) is a pass of its own.
enum PassKind : std::size_t { whole_micro_batch, forward_only, backward_only };

bool split_passes(const StageState& s) {
  return s.options.place.stages > 1;
}

}  // namespace

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The stage's layers `sequence` on x (stage 3: gathering each layer's parameters first).
torch::Tensor run_layers(StageState& s, const std::vector<int64_t>& sequence, torch::Tensor x) {
  ParameterFetcher* fetcher = s.fetcher.get();
  static const std::vector<std::size_t> none;
  for (int64_t index : sequence) {
    // Stage 3: the layer's own row and the rows of the tensors it borrows (tied weights).
    const auto& rows = fetcher ? s.store->plan().layer_rows[static_cast<std::size_t>(index)] : none;
    for (std::size_t row : rows) fetcher->acquire(row);
    x = s.layers[static_cast<std::size_t>(index)]->forward(x);
    for (auto row = rows.rbegin(); row != rows.rend(); ++row) x = gather_before_backward(x, fetcher, *row);
    for (std::size_t row : rows) fetcher->release(row);
  }
  return x;
}

// The last stage's share of the step's loss for micro-batch `micro`.
torch::Tensor loss_of(StageState& s, const torch::Tensor& output, const torch::Tensor& target,
                      int64_t micro_count) {
  return s.options.loss(output, target) / static_cast<double>(micro_count);
}

int64_t bytes_of_tensor(const torch::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
}

void queue_wait(StageState& s, std::shared_ptr<ReceiveArrival> arrival, std::string label) {
  const double timeout_s = s.options.collective_timeout_s + 10;  // the transport's own bound fires first
  s.compute->enqueue(
      "", [arrival = std::move(arrival), stopped = s.stopped, timeout_s, label, tracer = s.options.tracer] {
        Tracer::Scope waiting(arrival->arrived.done() ? nullptr : tracer, "compute wait", label);
        const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
        while (!arrival->arrived.wait_for(std::chrono::milliseconds(100))) {
          if (*stopped) return;
          if (Clock::now() > deadline)
            throw std::runtime_error(fmt::format("{}: nothing arrived in {:.0f} s", label, timeout_s));
        }
      });
}

bool arrived(const std::shared_ptr<ReceiveArrival>& arrival) {
  return !arrival || (arrival->arrived.done() && arrival->ok);
}

namespace {

// A validation forward: every layer in order, no graph and nothing kept; the last stage's
// loss goes back with the message (stage 3 gathers each layer as a forward pass does).
void run_eval_forward(StageState& s, const ForwardWork& w, caf::actor self) {
  const auto start = Clock::now();
  torch::NoGradGuard no_graph;
  std::vector<int64_t> all(s.layers.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  if (s.fetcher) s.fetcher->begin_pass(forward_only);
  torch::Device device = device_of(s);
  torch::Tensor input = s.first_stage() ? w.batch->input.to(device)
                                        : tensor_of(w.input, w.input_shape, device, s.options.dtype);
  torch::Tensor x = run_layers(s, all, input);
  if (s.fetcher) s.fetcher->end_pass();
  forward_computed done{w.step, w.micro, nullptr, {}};
  if (s.last_stage()) {
    done.eval_loss = s.options.loss(x, w.batch->target.to(device)).item<double>();
  } else {
    done.output = bytes_of(x, s.options.dtype);
    done.shape = x.sizes().vec();
  }
  done.seconds = seconds_since(start);
  caf::anon_send(self, std::move(done));
}

}  // namespace

void run_forward(StageState& s, ComputeSide& c, const ForwardWork& w, caf::actor self) {
  // This rank failed (issuing collectives alone would only confuse peers), or the input
  // never came: the stage hears why from the receive itself.
  if (*s.stopped || !arrived(w.arrival)) return;
  if (w.eval) return run_eval_forward(s, w, self);
  const auto start = Clock::now();
  if (c.forward_step != w.step) {  // the step's first forward, whichever micro-batch it is
    c.forward_step = w.step;
    c.loss_sum = 0;
  }
  const bool checkpointing = s.options.activation_checkpointing;
  Saved saved;
  saved.sequence = layer_sequence(s, w.step, w.micro);
  if (s.sequence_check) s.sequence_check->agree(w.step, w.micro, saved.sequence);
  if (s.fetcher) s.fetcher->begin_pass(split_passes(s) ? forward_only : whole_micro_batch);
  torch::Device device = device_of(s);
  saved.input = s.first_stage()
                    ? w.batch->input.to(device)
                    : tensor_of(w.input, w.input_shape, device, s.options.dtype).requires_grad_(true);
  if (s.last_stage()) saved.target = w.batch->target.to(device);
  torch::Tensor x;
  {
    // Checkpointing: nothing inside the layers is kept; backward runs them again.
    std::optional<torch::NoGradGuard> keep_nothing;
    if (checkpointing) keep_nothing.emplace();
    x = run_layers(s, saved.sequence, saved.input);
  }
  if (s.fetcher && split_passes(s)) s.fetcher->end_pass();
  forward_computed done{w.step, w.micro, nullptr, {}};
  if (s.last_stage()) {
    torch::Tensor loss = loss_of(s, x, saved.target, w.micro_count);
    c.loss_sum += loss.item<double>();
    if (!checkpointing) saved.output = loss;
  } else {
    if (x.scalar_type() != scalar_type_of(s.options.dtype))
      throw std::runtime_error(
          fmt::format("stage {} passes {} activations to the next stage; the pipeline moves the model's "
                      "dtype, {}",
                      s.options.place.stage, c10::toString(x.scalar_type()),
                      c10::toString(scalar_type_of(s.options.dtype))));
    if (!checkpointing) saved.output = x;
    done.output = bytes_of(x, s.options.dtype);
    done.shape = x.sizes().vec();
  }
  saved.held = MemoryCharge(s.options.ledger, MemoryKind::activations,
                            bytes_of_tensor(saved.input) + bytes_of_tensor(saved.output),
                            s.options.device ? MemorySide::device : MemorySide::host);
  c.saved[w.micro] = std::move(saved);
  done.seconds = seconds_since(start);
  caf::anon_send(self, std::move(done));
}

namespace {

using pipeline::Op;

// The first gradient pass of a step starts the accumulation (stages 0-1 zero the flat
// gradients; 2-3 trim the bucket pool).
void begin_gradients(StageState& s, ComputeSide& c, const BackwardWork& w) {
  if (c.gradient_step == w.step) return;
  c.gradient_step = w.step;
  c.finished = 0;
  s.rows->begin_step();
}

// After the pass that completes the step's gradients: the loss and the used marks, which
// the reduction waits for (see reduce_loss).
void report_step_gradients(StageState& s, ComputeSide& c, const BackwardWork& w, caf::actor self) {
  caf::anon_send(
      self, loss_computed{w.step, static_cast<float>(s.last_stage() ? c.loss_sum : 0.0), s.rows->used()});
}

// A split backward's weight half: the work its input half deferred.
void run_weight_half(StageState& s, ComputeSide& c, const BackwardWork& w, caf::actor self,
                     Clock::time_point start) {
  auto found = c.deferred.find(w.micro);
  if (found == c.deferred.end())
    throw std::runtime_error(
        fmt::format("backward_weight of micro-batch {} before its backward_input", w.micro));
  Deferred deferred = std::move(found->second);
  c.deferred.erase(found);
  const bool step_final = c.finished + 1 == w.micro_count;
  s.rows->begin_split_pass(true, step_final);
  {
    Tracer::Scope span(s.options.tracer, "stream compute", "weight gradients");
    deferred.work.run();
  }
  s.rows->end_split_pass();
  ++c.finished;
  deferred = Deferred{};  // the activations it kept go now
  caf::anon_send(self, backward_computed{w.op, w.step, w.micro, nullptr, seconds_since(start)});
  if (step_final) report_step_gradients(s, c, w, self);
}

}  // namespace

void run_backward(StageState& s, ComputeSide& c, const BackwardWork& w, caf::actor self) {
  if (*s.stopped || !arrived(w.arrival)) return;
  const auto start = Clock::now();
  begin_gradients(s, c, w);
  if (w.op == Op::backward_weight) return run_weight_half(s, c, w, self, start);
  const bool split = s.options.split_backward;
  const bool finishes = w.op == Op::backward;
  // The step's last gradient pass in the order they run (a table may end on any micro-batch).
  const bool step_final = finishes && c.finished + 1 == w.micro_count;
  if (split)
    s.rows->begin_split_pass(finishes, step_final);
  else
    s.rows->begin_micro(step_final);
  auto found = c.saved.find(w.micro);
  if (found == c.saved.end())
    throw std::runtime_error(fmt::format("backward of micro-batch {} before its forward", w.micro));
  Saved saved = std::move(found->second);
  c.saved.erase(found);
  if (s.fetcher && split_passes(s)) s.fetcher->begin_pass(backward_only);
  if (!saved.output.defined()) {  // checkpointed: the same forward again, now keeping its graph
    torch::Tensor x = run_layers(s, saved.sequence, saved.input);
    saved.output = s.last_stage() ? loss_of(s, x, saved.target, w.micro_count) : x;
  }
  Deferred* deferred = w.op == Op::backward_input ? &c.deferred[w.micro] : nullptr;
  {
    // Closed before this item's messages go (the work item's own span closes after them,
    // possibly after the step has ended): what the trace test checks reduction against.
    Tracer::Scope span(s.options.tracer, "stream compute", "autograd backward");
    std::optional<DeferredWeights::Scope> defer;
    if (deferred) defer.emplace(deferred->work);
    if (s.last_stage() && w.loss_seed == 1.0)
      saved.output.backward();
    else if (s.last_stage())  // d(seed · loss) = seed
      saved.output.backward(torch::full_like(saved.output, w.loss_seed));
    else
      saved.output.backward(
          tensor_of(w.output_gradient, w.output_shape, saved.output.device(), s.options.dtype));
  }
  if (split)
    s.rows->end_split_pass();
  else
    s.rows->flush();
  if (s.fetcher) s.fetcher->end_pass();
  backward_computed done{w.op, w.step, w.micro, nullptr};
  if (!s.first_stage()) done.input_gradient = bytes_of(saved.input.grad(), s.options.dtype);
  if (deferred) deferred->held = std::move(saved.held);  // the weight half still needs them
  saved = Saved{};  // the micro-batch's activations go now, not when the message is read
  if (finishes) ++c.finished;
  done.seconds = seconds_since(start);
  caf::anon_send(self, std::move(done));
  if (step_final) report_step_gradients(s, c, w, self);
}

}  // namespace troupe::stage
