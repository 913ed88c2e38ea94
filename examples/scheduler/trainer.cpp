// A trainer that brings its own pipeline scheduler: it registers "budget_greedy"
// (budget_greedy.hpp) and trains the built-in GPT of a job file with it, as `troupe run`
// would, on the ranks that `troupe launch --ranks N -- scheduler_trainer JOB.toml` starts.
//
//   scheduler_trainer JOB.toml [section.key=value ...] [--budget N] [--metrics FILE]
//                     [--parameters-out FILE]
//
// The job chooses it with [pipeline] schedule = "budget_greedy" (or pipeline.schedule=
// "budget_greedy" on the command line); --budget is the micro-batches of activations a
// stage may hold (default 2).
#include <troupe/scheduler.hpp>
#include <troupe/troupe.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "budget_greedy.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: scheduler_trainer JOB.toml [section.key=value ...] [--budget N] [--metrics FILE] "
                 "[--parameters-out FILE]\n");
    return 2;
  }
  std::vector<std::string> overrides;
  troupe::JobOutputs outputs;
  int64_t budget = 2;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool valued = i + 1 < argc;
    if (arg == "--budget" && valued)
      budget = std::atoll(argv[++i]);
    else if (arg == "--metrics" && valued)
      outputs.metrics_path = argv[++i];
    else if (arg == "--parameters-out" && valued)
      outputs.parameters_path = argv[++i];
    else
      overrides.push_back(arg);
  }
  if (budget < 1) {
    std::fprintf(stderr, "scheduler_trainer: --budget must be at least 1 micro-batch\n");
    return 2;
  }
  // Registered before the job is read, so [pipeline] schedule may name it.
  auto registered = troupe::register_scheduler("budget_greedy", [budget](const troupe::ScheduleShape& shape) {
    return example::budget_greedy(shape, budget);
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
