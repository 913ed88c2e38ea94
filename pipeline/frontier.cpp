#include "pipeline/frontier.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace troupe::pipeline {
namespace {

enum Slot : int { forward_slot = 0, input_slot = 1, weight_slot = 2 };

}  // namespace

Frontier::Frontier(const Layout& layout, int64_t rank, int64_t micro_batches, bool split)
    : layout_(layout),
      rank_(rank),
      micro_batches_(micro_batches),
      split_(split),
      cells_(static_cast<std::size_t>(layout.chunks * micro_batches)),
      next_receive_(static_cast<std::size_t>(layout.chunks), 0),
      total_((split ? 3 : 2) * layout.chunks * micro_batches) {}

Frontier::Cell& Frontier::cell(int64_t micro, int64_t chunk) {
  return cells_[static_cast<std::size_t>(chunk * micro_batches_ + micro)];
}
const Frontier::Cell& Frontier::cell(int64_t micro, int64_t chunk) const {
  return cells_[static_cast<std::size_t>(chunk * micro_batches_ + micro)];
}

Op Frontier::op_of(int slot) const {
  if (slot == forward_slot) return Op::forward;
  if (slot == input_slot) return split_ ? Op::backward_input : Op::backward;
  return Op::backward_weight;
}

bool Frontier::is_ready(int slot, int64_t micro, int64_t chunk) const {
  const Cell& c = cell(micro, chunk);
  switch (slot) {
    case forward_slot:
      return !c.forward && (!loads(chunk) || c.loaded) && (first(chunk) || c.arrived);
    case input_slot:
      return !c.input && c.forward && (last(chunk) || c.gradient);
    default:
      return split_ && !c.weight && c.input;
  }
}

void Frontier::refresh(int64_t micro, int64_t chunk) {
  Cell& c = cell(micro, chunk);
  for (int slot = forward_slot; slot <= weight_slot; ++slot)
    if (!c.listed[slot] && is_ready(slot, micro, chunk)) {
      c.listed[slot] = true;
      ready_.push_back(Action{op_of(slot), micro, chunk});
    }
}

void Frontier::loaded(int64_t micro, int64_t chunk) {
  cell(micro, chunk).loaded = true;
  refresh(micro, chunk);
}

void Frontier::activation_arrived(int64_t micro, int64_t chunk) {
  cell(micro, chunk).arrived = true;
  refresh(micro, chunk);
}

void Frontier::gradient_arrived(int64_t micro, int64_t chunk) {
  cell(micro, chunk).gradient = true;
  refresh(micro, chunk);
}

std::vector<Action> Frontier::receives_to_post() {
  std::vector<Action> out;
  for (int64_t chunk = 0; chunk < layout_.chunks; ++chunk) {
    if (first(chunk)) continue;
    int64_t waiting = 0;  // posted and not forwarded yet
    for (int64_t micro = 0; micro < micro_batches_; ++micro)
      if (cell(micro, chunk).posted && !cell(micro, chunk).forward) ++waiting;
    int64_t& next = next_receive_[static_cast<std::size_t>(chunk)];
    for (; next < micro_batches_ && waiting < kReceiveCredits; ++next, ++waiting) {
      cell(next, chunk).posted = true;
      out.push_back(Action{Op::recv_activation, next, chunk});
    }
  }
  return out;
}

std::string Frontier::where(int64_t chunk) const {
  return layout_.chunks == 1 ? "" : fmt::format(" (chunk {})", chunk);
}

Status Frontier::choose(const Action& a) {
  const bool with_chunk = layout_.chunks > 1;
  if (!is_compute(a.op))
    return make_error(
        fmt::format("chose {}, but a scheduler chooses forwards and backwards; troupe adds the "
                    "loads, the messages and the update",
                    describe(a)));
  if (a.micro < 0 || a.micro >= micro_batches_ || a.chunk < 0 || a.chunk >= layout_.chunks)
    return make_error(fmt::format("chose {}, but micro-batches are 0 to {} and chunks 0 to {}", describe(a),
                                  micro_batches_ - 1, layout_.chunks - 1));
  const std::string name = short_name(a, with_chunk);
  if (split_ && a.op == Op::backward)
    return make_error(fmt::format("chose {}, but this scheduler runs backwards in halves: I{} then W{}", name,
                                  a.micro, a.micro));
  if (!split_ && (a.op == Op::backward_input || a.op == Op::backward_weight))
    return make_error(
        fmt::format("chose {}, but this scheduler runs whole backwards (B{}); register it with "
                    "split_backward to run halves",
                    name, a.micro));
  const int slot = a.op == Op::forward           ? forward_slot
                   : a.op == Op::backward_weight ? weight_slot
                                                 : input_slot;
  Cell& c = cell(a.micro, a.chunk);
  const bool taken = slot == forward_slot ? c.forward : slot == input_slot ? c.input : c.weight;
  if (taken) return make_error(fmt::format("chose {} again", name));
  if (!is_ready(slot, a.micro, a.chunk)) {
    const int64_t stage = layout_.virtual_stage(rank_, a.chunk);
    std::string why;
    if (slot == forward_slot)
      why = loads(a.chunk) && !c.loaded
                ? "its micro-batch has not loaded"
                : fmt::format("its activation from stage {} has not arrived", layout_.rank_of(stage - 1));
    else if (slot == input_slot)
      why = !c.forward
                ? "its forward has not been chosen"
                : fmt::format("the gradient from stage {} has not arrived", layout_.rank_of(stage + 1));
    else
      why = "its input half has not been chosen";
    return make_error(fmt::format("chose {}, which is not ready: {} (ready: {})", name, why, ready_names()));
  }
  (slot == forward_slot ? c.forward : slot == input_slot ? c.input : c.weight) = true;
  ready_.erase(std::find(ready_.begin(), ready_.end(), a));
  ++chosen_;
  if (slot == forward_slot) ++held_;
  if (slot == weight_slot || (slot == input_slot && !split_)) --held_;
  refresh(a.micro, a.chunk);
  return {};
}

void Frontier::finished(const Action&) {
  ++finished_;
}

bool Frontier::anything_coming() const {
  for (int64_t chunk = 0; chunk < layout_.chunks; ++chunk)
    for (int64_t micro = 0; micro < micro_batches_; ++micro) {
      const Cell& c = cell(micro, chunk);
      if (loads(chunk) && !c.loaded) return true;
      if (c.posted && !c.arrived) return true;
      if (!last(chunk) && c.forward && !c.gradient) return true;
    }
  return false;
}

RankView Frontier::view(const ScheduleShape& shape, int64_t step, int64_t activation_bytes) const {
  return RankView{shape, rank_, step, ready_, running(), held_, remaining(), activation_bytes};
}

std::string Frontier::waiting_for() const {
  std::vector<std::string> what;
  for (int64_t chunk = 0; chunk < layout_.chunks; ++chunk) {
    const int64_t stage = layout_.virtual_stage(rank_, chunk);
    for (int64_t micro = 0; micro < micro_batches_; ++micro) {
      const Cell& c = cell(micro, chunk);
      if (loads(chunk) && !c.loaded) what.push_back(fmt::format("micro-batch {}{}", micro, where(chunk)));
      if (c.posted && !c.arrived)
        what.push_back(
            fmt::format("activation {}{} from stage {}", micro, where(chunk), layout_.rank_of(stage - 1)));
      if (!last(chunk) && c.forward && !c.gradient)
        what.push_back(
            fmt::format("gradient {}{} from stage {}", micro, where(chunk), layout_.rank_of(stage + 1)));
    }
  }
  return what.empty() ? "nothing" : fmt::format("{}", fmt::join(what, ", "));
}

std::string Frontier::ready_names() const {
  std::vector<std::string> names;
  for (const Action& a : ready_) names.push_back(short_name(a, layout_.chunks > 1));
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

const char* event_name(EventKind kind) {
  switch (kind) {
    case EventKind::step_started:
      return "step_started";
    case EventKind::batch_loaded:
      return "batch_loaded";
    case EventKind::activation_arrived:
      return "activation_arrived";
    case EventKind::gradient_arrived:
      return "gradient_arrived";
    case EventKind::compute_finished:
      return "compute_finished";
    case EventKind::send_completed:
      return "send_completed";
    case EventKind::memory_over_limit:
      return "memory_over_limit";
    case EventKind::memory_under_limit:
      return "memory_under_limit";
  }
  return "unknown";
}

}  // namespace troupe::pipeline
