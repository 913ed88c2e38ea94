#include "pipeline/schedule.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipeline/event_plan.hpp"
#include "pipeline/list_schedule.hpp"

namespace troupe::pipeline {
namespace {

using Order = std::vector<Action>;

Order gpipe(const ScheduleShape& shape) {
  Order order;
  for (int64_t i = 0; i < shape.micro_batches; ++i) order.push_back({Op::forward, i, 0});
  for (int64_t i = 0; i < shape.micro_batches; ++i) order.push_back({Op::backward, i, 0});
  return order;
}

// Warm-up forwards fill the pipeline below this rank; then each forward is followed by the
// oldest backward, so at most p − rank micro-batches are held; the cool-down drains it.
Order one_f_one_b(const ScheduleShape& shape, int64_t rank) {
  const int64_t m = shape.micro_batches;
  const int64_t warmup = std::min(shape.stages - rank - 1, m);
  Order order;
  for (int64_t i = 0; i < warmup; ++i) order.push_back({Op::forward, i, 0});
  for (int64_t i = 0; i < m - warmup; ++i) {
    order.push_back({Op::forward, warmup + i, 0});
    order.push_back({Op::backward, i, 0});
  }
  for (int64_t i = m - warmup; i < m; ++i) order.push_back({Op::backward, i, 0});
  return order;
}

// Megatron's virtual pipeline: the k-th forward of a rank is micro-batch
// (k / pv)·p + k mod p of chunk (k / p) mod v, so groups of p micro-batches go through
// each chunk in turn; backwards take the chunks in reverse. Rank r warms up with
// 2(p − r − 1) + (v − 1)p forwards, then alternates, then drains.
Order interleaved(const ScheduleShape& shape, int64_t rank) {
  const int64_t p = shape.stages, v = shape.virtual_stages, total = shape.micro_batches * v;
  auto nth = [&](Op op, int64_t k) {
    const int64_t group = (k / p) % v;
    return Action{op, (k / (p * v)) * p + k % p, op == Op::forward ? group : v - 1 - group};
  };
  const int64_t warmup = shape.micro_batches == p ? total : std::min(total, 2 * (p - rank - 1) + (v - 1) * p);
  Order order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(nth(Op::forward, k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(nth(Op::forward, warmup + k));
    order.push_back(nth(Op::backward, k));
  }
  for (int64_t k = total - warmup; k < total; ++k) order.push_back(nth(Op::backward, k));
  return order;
}

// ZB-H1: 1F1B's order with each backward split, rank r running the weight half of
// micro-batch k − r after the input half of k (r weight halves behind) and the rest at the
// end. The tail's weight halves fill the idle time 1F1B has while the last backwards travel
// up; every rank holds at most p micro-batches, 1F1B's stage 0.
Order zb_h1(const ScheduleShape& shape, int64_t rank) {
  Order order;
  int64_t inputs = 0, weights = 0;
  for (const Action& a : one_f_one_b(shape, rank)) {
    if (a.op != Op::backward) {
      order.push_back(a);
      continue;
    }
    order.push_back({Op::backward_input, a.micro, 0});
    if (inputs++ >= rank) order.push_back({Op::backward_weight, weights++, 0});
  }
  while (weights < shape.micro_batches) order.push_back({Op::backward_weight, weights++, 0});
  return order;
}

// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): rank r holds
// chunk 0 = virtual stage r and chunk 1 = stage 2p − 1 − r, and runs
//   2(p − r) − 1 forwards of chunk 0; r pairs (forward of chunk 1, forward of chunk 0);
//   p − r rounds of chunk 1 (forward, input half, weight half);
//   then, while forwards remain: a forward of chunk 0, its oldest input and weight
//   halves, then the same for chunk 1;
//   then r pairs of input halves (chunk 0, chunk 1), p − r of chunk 0's input half with
//   its oldest weight half, and the remaining weight halves, chunk 1's first.
// Its idle time is p − 1 slots of 6m + p − 1 at equal costs, like the list scheduler's,
// but its steady state keeps each input half beside its weight half and each chunk's
// forward beside its backward: when a backward costs more than a forward (on a CPU, an
// input half 1.3 forwards and a weight half 0.8), it stays within a point or two of that,
// where the list scheduler's order, which interleaves micro-batches to fill unit slots,
// idled 15% of a step. Needs m ≥ 2p − 1 forwards for its warm-up.
Order zb_v(const ScheduleShape& shape, int64_t rank) {
  const int64_t p = shape.stages, m = shape.micro_batches;
  Order order;
  int64_t forwards[2] = {0, 0}, inputs[2] = {0, 0}, weights[2] = {0, 0};
  auto forward = [&](int64_t chunk) { order.push_back({Op::forward, forwards[chunk]++, chunk}); };
  auto input = [&](int64_t chunk) { order.push_back({Op::backward_input, inputs[chunk]++, chunk}); };
  auto weight = [&](int64_t chunk) { order.push_back({Op::backward_weight, weights[chunk]++, chunk}); };
  for (int64_t i = 0; i < 2 * (p - rank) - 1; ++i) forward(0);
  for (int64_t i = 0; i < rank; ++i) {
    forward(1);
    forward(0);
  }
  for (int64_t i = 0; i < p - rank; ++i) {
    forward(1);
    input(1);
    weight(1);
  }
  while (forwards[1] < forwards[0] || forwards[0] < m) {
    if (forwards[0] < m) forward(0);
    input(0);
    weight(0);
    forward(1);
    input(1);
    weight(1);
  }
  for (int64_t i = 0; i < rank; ++i) {
    input(0);
    input(1);
  }
  for (int64_t i = 0; i < p - rank; ++i) {
    input(0);
    weight(0);
  }
  while (weights[1] < m) weight(1);
  while (weights[0] < m) weight(0);
  return order;
}

// On the first virtual stage an input half followed at once by the weight half of the
// same micro-batch is one whole backward: no stage waits for that input half (the first
// stage sends no gradient), and on a CPU the two halves cost 5-15% more than the whole
// (two autograd traversals, two passes over the activations). Elsewhere the input half's
// gradient goes out a weight half earlier, which is what the split is for.
Order merge_first_stage_halves(const Layout& layout, int64_t rank, const Order& order) {
  Order merged;
  for (const Action& a : order) {
    const bool completes = !merged.empty() && a.op == Op::backward_weight && layout.first(rank, a.chunk) &&
                           merged.back() == Action{Op::backward_input, a.micro, a.chunk};
    if (completes)
      merged.back().op = Op::backward;
    else
      merged.push_back(a);
  }
  return merged;
}

const std::vector<std::string>& built_in_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv"};
  return names;
}

bool built_in(std::string_view schedule) {
  const auto& names = built_in_names();
  return std::find(names.begin(), names.end(), schedule) != names.end();
}

// Schedules registered by trainers (include/troupe/scheduler.hpp), by name.
struct Registry {
  std::mutex mutex;
  std::map<std::string, CustomSchedule, std::less<>> schedules;
};
Registry& registry() {
  static Registry r;
  return r;
}

// A copy of the registered schedule `name`, if there is one.
std::optional<CustomSchedule> custom(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.schedules.find(name);
  if (found == r.schedules.end()) return std::nullopt;
  return found->second;
}

bool known(std::string_view schedule) {
  return built_in(schedule) || custom(schedule).has_value();
}

// A registered schedule's orders for `shape`, checked for shape: a row per rank, compute
// actions only.
Result<std::vector<Order>> custom_orders(std::string_view name, const CustomSchedule& schedule,
                                         const ScheduleShape& shape) {
  std::vector<Order> orders = schedule.make(shape);
  if (static_cast<int64_t>(orders.size()) != shape.stages)
    return make_error(fmt::format("scheduler \"{}\" returned {} rows of actions for {} stages (one row each)",
                                  name, orders.size(), shape.stages));
  for (std::size_t rank = 0; rank < orders.size(); ++rank)
    for (const Action& a : orders[rank])
      if (!is_compute(a.op))
        return make_error(
            fmt::format("scheduler \"{}\" gave stage {} the action {}: a scheduler lists forwards "
                        "and backwards (whole or halved), and troupe adds the messages around them",
                        name, rank, describe(a)));
  return orders;
}

}  // namespace

Status register_schedule(const std::string& name, CustomSchedule schedule) {
  if (name.empty()) return make_error("a scheduler needs a name");
  if (built_in(name)) return make_error(fmt::format("\"{}\" is a built-in schedule's name", name));
  if (!schedule.make == !schedule.events)
    return make_error(
        fmt::format("scheduler \"{}\" needs either a schedule function or an event-driven "
                    "scheduler factory, not {}",
                    name, schedule.make ? "both" : "neither"));
  TROUPE_TRY(check_layout(Layout{1, schedule.virtual_stages, schedule.layout}));
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.schedules.emplace(name, std::move(schedule)).second)
    return make_error(fmt::format("a scheduler named \"{}\" is registered already", name));
  return {};
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> names = built_in_names();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& entry : r.schedules) names.push_back(entry.first);
  return names;
}

EventSchedulerFactory event_scheduler(std::string_view schedule) {
  if (auto registered = custom(schedule)) return registered->events;
  return {};
}

int64_t default_virtual_stages(std::string_view schedule) {
  if (auto registered = custom(schedule)) return registered->virtual_stages;
  return schedule == "interleaved_1f1b" || schedule == "zbv" ? 2 : 1;
}

Layout layout_of(std::string_view schedule, const ScheduleShape& shape) {
  ChunkLayout kind = schedule == "zbv" ? ChunkLayout::v_shape : ChunkLayout::interleaved;
  if (auto registered = custom(schedule)) kind = registered->layout;
  return Layout{shape.stages, shape.virtual_stages, kind};
}

Status check_shape(std::string_view schedule, const ScheduleShape& shape) {
  if (!known(schedule))
    return make_error(fmt::format("unknown schedule \"{}\": the schedules are {}", schedule,
                                  fmt::join(schedule_names(), ", ")));
  const int64_t p = shape.stages, m = shape.micro_batches, v = shape.virtual_stages;
  if (p < 1 || m < 1 || v < 1)
    return make_error(fmt::format(
        "a schedule needs at least one stage, micro-batch and chunk per rank (stages {}, micro-batches {}, "
        "virtual stages {})",
        p, m, v));
  if (!built_in(schedule)) return check_layout(layout_of(schedule, shape));
  const bool chunked = schedule == "interleaved_1f1b" || schedule == "zbv";
  if (!chunked && v != 1)
    return make_error(fmt::format(
        "{} runs one chunk per rank, not {} virtual stages: virtual stages need interleaved_1f1b or zbv",
        schedule, v));
  if (schedule == "zbv" && v != 2)
    return make_error(fmt::format("zbv runs 2 virtual stages per rank (a V), not {}", v));
  if ((schedule == "1f1b" || schedule == "zb_h1") && m < p)
    return make_error(fmt::format(
        "{} needs at least as many micro-batches as stages, to fill the pipeline: {} micro-batches "
        "for {} stages",
        schedule, m, p));
  if (schedule == "interleaved_1f1b" && m % p != 0)
    return make_error(fmt::format(
        "interleaved_1f1b takes micro-batches in groups of one per stage: {} micro-batches is not a multiple "
        "of {} stages",
        m, p));
  return {};
}

double bubble_formula(std::string_view schedule, const ScheduleShape& shape) {
  const auto idle = static_cast<double>(shape.stages - 1), m = static_cast<double>(shape.micro_batches);
  if (schedule == "interleaved_1f1b") return idle / (static_cast<double>(shape.virtual_stages) * m + idle);
  if (schedule == "zb_h1") return idle / (3.0 * m + idle);
  if (schedule == "zbv") return idle / (6.0 * m + idle);
  return idle / (m + idle);
}

bool splits_backward(const Program& program) {
  return std::any_of(program.begin(), program.end(),
                     [](const Action& a) { return a.op == Op::backward_input; });
}

bool splits_backward(const std::vector<Program>& programs) {
  return std::any_of(programs.begin(), programs.end(), [](const Program& p) { return splits_backward(p); });
}

Program surround(const Layout& layout, int64_t rank, const std::vector<Action>& order) {
  Program program;
  for (const Action& a : order) {
    const bool first = layout.first(rank, a.chunk), last = layout.last(rank, a.chunk);
    if (a.op == Op::forward) {
      if (first || last) program.push_back({Op::load, a.micro, a.chunk});
      if (!first) program.push_back({Op::recv_activation, a.micro, a.chunk});
      program.push_back(a);
      if (!last) program.push_back({Op::send_activation, a.micro, a.chunk});
    } else if (makes_input_gradient(a.op)) {
      if (!last) program.push_back({Op::recv_gradient, a.micro, a.chunk});
      program.push_back(a);
      if (!first) program.push_back({Op::send_gradient, a.micro, a.chunk});
    } else {
      program.push_back(a);
    }
  }
  program.push_back({Op::reduce_gradients, -1, 0});
  program.push_back({Op::optimizer_step, -1, 0});
  return program;
}

Result<std::vector<Program>> make_programs(std::string_view schedule, const ScheduleShape& shape) {
  TROUPE_TRY(check_shape(schedule, shape));
  const Layout layout = layout_of(schedule, shape);
  std::vector<Order> orders;
  if (auto registered = custom(schedule); registered && registered->events) {
    auto planned =
        plan_events(schedule, registered->events, layout, shape.micro_batches, registered->split_backward);
    if (!planned) return planned.error();
    orders = std::move(*planned);
  } else if (registered) {
    auto made = custom_orders(schedule, *registered, shape);
    if (!made) return made.error();
    orders = std::move(*made);
  } else if (schedule == "zbv" && shape.micro_batches >= 2 * shape.stages - 1) {
    for (int64_t rank = 0; rank < shape.stages; ++rank) orders.push_back(zb_v(shape, rank));
  } else if (schedule == "zbv") {
    // Too few micro-batches for ZB-V's warm-up: the list scheduler places them, holding no
    // more than 1F1B's stage 0 (p micro-batches of a stage's layers: 2p of half-stage chunks).
    orders = list_schedule(layout, shape.micro_batches, 2 * shape.stages);
  } else {
    for (int64_t rank = 0; rank < shape.stages; ++rank)
      orders.push_back(schedule == "gpipe"              ? gpipe(shape)
                       : schedule == "1f1b"             ? one_f_one_b(shape, rank)
                       : schedule == "interleaved_1f1b" ? interleaved(shape, rank)
                                                        : zb_h1(shape, rank));
  }
  if (schedule == "zbv" || schedule == "zb_h1")
    for (int64_t rank = 0; rank < shape.stages; ++rank) {
      Order& order = orders[static_cast<std::size_t>(rank)];
      order = merge_first_stage_halves(layout, rank, order);
    }
  std::vector<Program> programs;
  for (int64_t rank = 0; rank < shape.stages; ++rank)
    programs.push_back(surround(layout, rank, orders[static_cast<std::size_t>(rank)]));
  return programs;
}

Result<Program> make_program(std::string_view schedule, const ScheduleShape& shape, int64_t rank) {
  auto programs = make_programs(schedule, shape);
  if (!programs) return programs.error();
  if (rank < 0 || rank >= shape.stages)
    return make_error(fmt::format("stage {} is not one of the {} stages", rank, shape.stages));
  return std::move((*programs)[static_cast<std::size_t>(rank)]);
}

}  // namespace troupe::pipeline
