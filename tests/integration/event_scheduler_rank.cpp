// A trainer with event-driven pipeline schedulers, for schedules_test: as the scheduler
// example's trainer, `event_scheduler_rank JOB.toml [key=value ...] [--metrics FILE]
// [--parameters-out FILE]` trains the built-in GPT with the schedule the job names:
//   budget_events: the example's (examples/scheduler/budget_events.hpp), 2 micro-batches;
//   zbv_events:    split backwards over a V of 2 chunks per rank, decided as zbv's list
//                  scheduler plans it (tests/support/zero_bubble_events.hpp);
//   memory_capped: budget_events with no budget and a 1-byte activation limit, failing if
//                  a forward is ever chosen past what the memory events allow;
//   forgets:       budget_events, except that from step 2 on stage 0 never runs the forward
//                  of the last micro-batch: a scheduler stuck on its own rank;
//   waits:         from step 2, stage 0 runs one forward and then waits for its gradient,
//                  while stage 1 forwards only with two activations in: a wait across ranks
//                  that no rank alone can see.
#include <troupe/scheduler.hpp>
#include <troupe/troupe.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "examples/scheduler/budget_events.hpp"
#include "pipeline/frontier.hpp"
#include "tests/support/zero_bubble_events.hpp"

namespace {

using troupe::Action;
using troupe::Op;
using troupe::RankView;

// The example's scheduler with no budget but a 1-byte activation limit: only troupe's
// memory_over_limit event holds its forwards back, so at run time (activation bytes known;
// the plan has none and no memory events) it throws, failing the step, if a rank ever
// holds more than the lookahead's two chunk micro-batches.
class MemoryCapped : public example::BudgetEvents {
 public:
  MemoryCapped() : BudgetEvents(int64_t{1} << 20, 1) {}
  std::optional<Action> next(const RankView& rank) override {
    std::optional<Action> pick = BudgetEvents::next(rank);
    if (pick && pick->op == Op::forward && rank.activation_bytes > 0 &&
        rank.held >= troupe::pipeline::kComputeLookahead)
      throw std::runtime_error(
          fmt::format("a forward with {} micro-batches held, over the memory limit", rank.held));
    return pick;
  }
};

class Forgets : public example::BudgetEvents {
 public:
  Forgets() : BudgetEvents(2, 0) {}
  std::optional<Action> next(const RankView& rank) override {
    if (rank.step < 2 || rank.rank != 0) return BudgetEvents::next(rank);
    RankView without = rank;
    without.ready.clear();
    for (const Action& a : rank.ready)
      if (!(a.op == Op::forward && a.micro == rank.shape.micro_batches - 1)) without.ready.push_back(a);
    return BudgetEvents::next(without);
  }
};

class Waits : public example::BudgetEvents {
 public:
  Waits() : BudgetEvents(2, 0) {}
  std::optional<Action> next(const RankView& rank) override {
    if (rank.step < 2) return BudgetEvents::next(rank);
    if (rank.rank == 0 && rank.held > 0) return rank.oldest(Op::backward);
    if (rank.rank == 1 && rank.held == 0 && rank.ready.size() < 2) return std::nullopt;
    return BudgetEvents::next(rank);
  }
};

template <class Scheduler, class... Args>
troupe::EventSchedulerFactory factory(Args... args) {
  return [=](const troupe::ScheduleShape&, int64_t) { return std::make_unique<Scheduler>(args...); };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: event_scheduler_rank JOB.toml [key=value ...] [--metrics F] [--parameters-out F]\n");
    return 2;
  }
  std::vector<std::string> overrides;
  troupe::JobOutputs outputs;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--metrics" && i + 1 < argc)
      outputs.metrics_path = argv[++i];
    else if (arg == "--parameters-out" && i + 1 < argc)
      outputs.parameters_path = argv[++i];
    else
      overrides.push_back(arg);
  }
  for (auto registered : {
           troupe::register_event_scheduler("budget_events",
                                            factory<example::BudgetEvents>(int64_t{2}, int64_t{0})),
           troupe::register_event_scheduler(
               "zbv_events",
               [](const troupe::ScheduleShape&shape, int64_t) {
                 return std::make_unique<troupe::testing::ZeroBubbleEvents>(shape.stages);
               },
               true, troupe::ChunkLayout::v_shape, 2),
           troupe::register_event_scheduler("forgets", factory<Forgets>()),
           troupe::register_event_scheduler("memory_capped", factory<MemoryCapped>()),
           troupe::register_event_scheduler("waits", factory<Waits>()),
       })
    if (!registered) {
      std::fprintf(stderr, "event_scheduler_rank: %s\n", registered.error().message.c_str());
      return 1;
    }
  auto job = troupe::load_config_file(argv[1], overrides);
  if (!job) {
    std::fprintf(stderr, "event_scheduler_rank: %s\n", job.error().message.c_str());
    return 2;
  }
  return troupe::run_gpt_rank(*job, outputs);
}
