// A trainer that brings its own pipeline schedulers: it registers "budget_greedy", a
// schedule function that plans the step up front (budget_greedy.hpp), and "budget_events",
// a scheduler that decides from events as the step goes (budget_events.hpp), and trains the
// built-in GPT of a job file with the one the job names, as `troupe run` would, on the
// ranks that `troupe launch --ranks N -- scheduler_trainer JOB.toml` starts.
//
//   scheduler_trainer JOB.toml [section.key=value ...] [--budget N] [--activation-limit-mib M]
//                     [--metrics FILE] [--parameters-out FILE]
//
// The job chooses one with [pipeline] schedule = "budget_greedy" or "budget_events" (or
// pipeline.schedule=... on the command line); --budget is the micro-batches of activations
// a stage may hold (default 2); --activation-limit-mib holds budget_events' forwards back
// while the stage's activation memory is over it (default: no limit).
#include <troupe/scheduler.hpp>
#include <troupe/troupe.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "budget_events.hpp"
#include "budget_greedy.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: scheduler_trainer JOB.toml [section.key=value ...] [--budget N] "
                 "[--activation-limit-mib M] [--metrics FILE] [--parameters-out FILE]\n");
    return 2;
  }
  std::vector<std::string> overrides;
  troupe::JobOutputs outputs;
  int64_t budget = 2, limit_mib = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool valued = i + 1 < argc;
    if (arg == "--budget" && valued)
      budget = std::atoll(argv[++i]);
    else if (arg == "--activation-limit-mib" && valued)
      limit_mib = std::atoll(argv[++i]);
    else if (arg == "--metrics" && valued)
      outputs.metrics_path = argv[++i];
    else if (arg == "--parameters-out" && valued)
      outputs.parameters_path = argv[++i];
    else
      overrides.push_back(arg);
  }
  if (budget < 1 || limit_mib < 0) {
    std::fprintf(stderr,
                 "scheduler_trainer: --budget must be at least 1 micro-batch and --activation-limit-mib at "
                 "least 0\n");
    return 2;
  }
  // Registered before the job is read, so [pipeline] schedule may name them.
  auto registered = troupe::register_scheduler("budget_greedy", [budget](const troupe::ScheduleShape& shape) {
    return example::budget_greedy(shape, budget);
  });
  const int64_t limit_bytes = limit_mib << 20;
  if (registered)
    registered =
        troupe::register_event_scheduler("budget_events", [=](const troupe::ScheduleShape&, int64_t) {
          return std::make_unique<example::BudgetEvents>(budget, limit_bytes);
        });
  if (!registered) {
    std::fprintf(stderr, "scheduler_trainer: %s\n", registered.error().message.c_str());
    return 1;
  }
  auto job = troupe::load_config_file(argv[1], overrides);
  if (!job) {
    std::fprintf(stderr, "scheduler_trainer: %s\n", job.error().message.c_str());
    return 2;
  }
  return troupe::run_gpt_rank(*job, outputs);
}
