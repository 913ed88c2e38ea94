// `troupe`: the command line.
//   troupe run FILE      start world_size ranks of the job on this machine
//   troupe rank FILE     run one rank (under any launcher)
//   troupe check FILE    validate the job and print it resolved
//   troupe estimate FILE predict the model-state bytes each rank will hold
//   troupe launch --ranks N -- PROGRAM ARGS...   start N ranks of any program
//   troupe bench ...     measure the transport, the collectives, the optimizer, the disk
// This program links no LibTorch and no actors: it checks, estimates and launches in a few
// MB. What trains or measures (rank, bench, run --reference) is troupe-core, which this
// program becomes by exec with the same arguments, and which `run` starts as each rank.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pipeline/picture.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"
#include "pipeline/table.hpp"
#include "runtime/config/load.hpp"
#include "runtime/config/render.hpp"
#include "runtime/config/suggest.hpp"
#include "runtime/config/token.hpp"
#include "runtime/coordinator.hpp"
#include "runtime/estimate.hpp"
#include "runtime/host_check.hpp"
#include "runtime/launch/environment.hpp"
#include "runtime/launch/launcher.hpp"
#include "runtime/model/model_shape.hpp"
#include "tools/cli/core_program.hpp"
#include "tools/cli/job_arguments.hpp"

namespace troupe {
namespace {

/// Subcommands troupe-core parses and runs; the front only lists them in --help.
constexpr const char* kCoreCommands[] = {"rank",    "bench",          "bench-rank", "export",
                                         "profile", "profile-device", "simulate",   "plan"};

bool is_core_command(const char* name) {
  for (const char* c : kCoreCommands)
    if (std::strcmp(c, name) == 0) return true;
  return false;
}

int report_config_error(const Error& e) {
  std::fprintf(stderr, "troupe: %s\n", e.message.c_str());
  return kUsageExitCode;
}

// What a run of `job` on this machine would fail on, before anything starts: the paths it
// writes, and the memory of the ranks `troupe run` starts here (world_size of them, or the
// local world size when this runs under a launcher that says how many share this machine).
Status check_this_machine(const JobConfig& job, const std::string& metrics_path) {
  TROUPE_TRY(check_model_pipeline(job));
  TROUPE_TRY(check_output_paths(job, metrics_path));
  auto launched = detect_rank_environment(process_environment());
  if (!launched) return launched.error();
  const int64_t local = *launched ? (*launched)->local_world_size : job.cluster.world_size;
  if (local > kLaunchRanksMax)
    return make_error(
        fmt::format("{}: [cluster] world_size = {}: troupe run starts at most {} ranks on one "
                    "machine; start the ranks of each machine with its own launcher",
                    job.source, local, kLaunchRanksMax));
  return check_host_memory(job, local,
                           fmt::format("the {} rank{} on this machine", local, local == 1 ? "" : "s"));
}

// [train] max_restarts: a launch that ends because a rank failed starts every rank again,
// from the newest complete checkpoint under [checkpoint] dir (none yet, or no dir: from the
// start), saying so. A launch the user stopped (a signal to the launcher) ends the run.
int launch_with_restarts(const JobConfig& job, const JobArguments& a, LaunchOptions launch) {
  const int64_t limit = job.train.max_restarts;
  for (int64_t restart = 1;; ++restart) {
    const int code = launch_ranks(launch);
    if (code == 0 || restart > limit || launch_interrupted()) return code;
    std::string from = "the start (no [checkpoint] dir)";
    if (!job.checkpoint.dir.empty()) {
      JobArguments again = a;
      again.resume = "latest";
      launch.argv.resize(2);  // the core program and "rank"
      for (auto& arg : job_argv(again)) launch.argv.push_back(std::move(arg));
      from = "the newest complete checkpoint under " + job.checkpoint.dir;
    }
    std::fprintf(stderr, "troupe: restart %lld of %lld: starting every rank again from %s\n",
                 static_cast<long long>(restart), static_cast<long long>(limit), from.c_str());
  }
}

// Starts world_size copies of `troupe-core rank` with the same arguments.
int run_cluster(const JobConfig& job, const JobArguments& a) {
  if (auto fits = check_this_machine(job, a.metrics_path); !fits) return report_config_error(fits.error());
  if (job.cluster.world_size > 1) {
    auto address = parse_host_port(job.cluster.coordinator, "[cluster] coordinator");
    if (!address) return report_config_error(address.error());
    auto free = check_port_free(*address);
    if (!free) return report_config_error(free.error());
  }
  auto core = core_program_path();
  if (!core) {
    std::fprintf(stderr, "troupe: %s\n", core.error().message.c_str());
    return kCannotStartExitCode;
  }
  LaunchOptions launch;
  launch.ranks = job.cluster.world_size;
  launch.argv = {*core, "rank"};
  for (auto& arg : job_argv(a)) launch.argv.push_back(std::move(arg));
  launch.extra_env = {{"TROUPE_PROGRESS", "relay"}};
  if (job.cluster.secret.empty()) {  // this job's own secret, in the ranks' environment only
    auto token = random_token();
    if (!token) return report_config_error(token.error());
    launch.extra_env.emplace_back(kTokenVariable, *token);
  }
  return launch_with_restarts(job, a, std::move(launch));
}

// What loading went on past (a DeepSpeed key ignored), once, before anything runs.
void print_warnings(const JobConfig& job) {
  for (const std::string& warning : job.warnings)
    std::fprintf(stderr, "troupe: warning: %s\n", warning.c_str());
}

// `here`: also whether this machine can run the job's ranks (off for a job written for
// another cluster, such as the simulator's).
int check_job(const JobArguments& a, bool here) {
  auto job = load_config_file(a.file, overrides_of(a));
  if (!job) return report_config_error(job.error());
  print_warnings(*job);
  if (auto fits = here ? check_this_machine(*job, "") : Status{}; !fits)
    return report_config_error(fits.error());
  std::printf("%s", render_config(*job).c_str());
  return 0;
}

int print_estimate(const JobArguments& a, bool as_json) {
  auto job = load_config_file(a.file, overrides_of(a));
  if (!job) return report_config_error(job.error());
  auto predicted = estimate_job(*job);
  if (!predicted) return report_config_error(predicted.error());
  std::string text = as_json ? estimate_json(*predicted) + "\n" : render_estimate(*predicted);
  std::printf("%s", text.c_str());
  return 0;
}

struct ScheduleArguments {
  std::string schedule = "1f1b";
  int64_t pp = 2;
  int64_t micro_batches = 4;
  int64_t virtual_stages = 0;  // 0: the schedule's own
  std::string svg;
  bool json = false;
  bool csv = false;
};

// `troupe schedule show`: the planned timeline of a built-in schedule at unit costs, from
// the simulated executor that checks every schedule before a job runs it.
int show_schedule(const ScheduleArguments& a) {
  const auto& names = pipeline::schedule_names();
  if (std::find(names.begin(), names.end(), a.schedule) == names.end()) {
    auto near = suggest(a.schedule, names);
    return report_config_error(
        make_error(fmt::format("--schedule \"{}\" is not a schedule{}; the schedules are {}", a.schedule,
                               near ? " (did you mean \"" + *near + "\"?)" : "", fmt::join(names, ", "))));
  }
  const int64_t v = a.virtual_stages > 0 ? a.virtual_stages : pipeline::default_virtual_stages(a.schedule);
  pipeline::ScheduleShape shape{a.pp, a.micro_batches, v};
  auto programs = pipeline::make_programs(a.schedule, shape);
  if (!programs) return report_config_error(programs.error());
  if (a.csv) {
    std::printf("%s", pipeline::schedule_table(*programs, v).c_str());
    return 0;
  }
  auto simulated = pipeline::simulate(*programs, pipeline::layout_of(a.schedule, shape), a.micro_batches);
  if (!simulated) return report_config_error(simulated.error());
  const double formula = pipeline::bubble_formula(a.schedule, shape);
  const std::string about = v > 1 ? fmt::format("{}, pp {}, v {}, m {}", a.schedule, a.pp, v, a.micro_batches)
                                  : fmt::format("{}, pp {}, m {}", a.schedule, a.pp, a.micro_batches);
  if (!a.svg.empty()) {
    std::ofstream out(a.svg);
    out << pipeline::timeline_svg(*simulated,
                                  fmt::format("{}: bubble {:.3f} at unit costs", about, simulated->bubble()));
    if (!out.good())
      return report_config_error(make_error("--svg " + a.svg + ": cannot write the picture there"));
  }
  if (a.json) {
    nlohmann::json j = {{"schedule", a.schedule},
                        {"pp", a.pp},
                        {"micro_batches", a.micro_batches},
                        {"virtual_stages", v},
                        {"slots", simulated->slots},
                        {"bubble", simulated->bubble()},
                        {"bubble_formula", formula},
                        {"peak_activations", simulated->peak_activations},
                        {"peak_stage_activations", simulated->peak_stage_activations()}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s", pipeline::timeline_text(*simulated).c_str());
  std::printf(
      "%s: %lld slots, bubble %.4f at unit costs (the formula's %.4f); %s held at the peak by stage: %s\n",
      about.c_str(), static_cast<long long>(simulated->slots), simulated->bubble(), formula,
      v > 1 ? "chunk micro-batches" : "micro-batches",
      fmt::format("{}", fmt::join(simulated->peak_activations, ", ")).c_str());
  return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
  using namespace troupe;
  if (argc > 1 && is_core_command(argv[1]))
    return exec_core_program(std::vector<std::string>(argv + 1, argv + argc));

  CLI::App app{"troupe: DeepSpeed-style training as an actor system over UCX"};
  app.require_subcommand(1);

  JobArguments run_args;
  auto* run = app.add_subcommand("run", "train the job: start its ranks on this machine");
  add_job_arguments(run, run_args);
  run->add_flag("--reference", run_args.reference, "train in one process with plain LibTorch (no actors)");

  app.add_subcommand("rank", "run one rank of the job (rank and world size from the environment)");

  JobArguments check_args;
  auto* check = app.add_subcommand("check", "validate the job and print the resolved configuration");
  add_config_arguments(check, check_args);
  bool as_toml = false;  // what check prints in any case: the flag says so for a DeepSpeed JSON
  check->add_flag("--toml", as_toml,
                  "print the job as TOML (for a DeepSpeed JSON config, its TOML equivalent)");
  bool elsewhere = false;
  check->add_flag(
      "--not-here", elsewhere,
      "check the job alone, not whether this machine can run its ranks (a job for another cluster)");

  JobArguments estimate_args;
  bool estimate_as_json = false;
  auto* estimate = app.add_subcommand(
      "estimate", "predict the bytes each rank will hold: parameters, gradients, optimizer state, buffers");
  add_config_arguments(estimate, estimate_args);
  estimate->add_flag("--json", estimate_as_json, "one JSON object instead of the table");

  int64_t launch_ranks_count = 1;
  std::vector<std::string> program;
  auto* launch =
      app.add_subcommand("launch", "start N ranks of any program (e.g. a trainer embedding troupe)");
  launch->add_option("--ranks,-n", launch_ranks_count, "number of ranks")
      ->required()
      ->check(CLI::Range(int64_t{1}, kLaunchRanksMax));
  launch->add_option("PROGRAM", program, "program and its arguments (after --)")->required();

  app.add_subcommand(
      "export",
      "write a checkpoint's parameters as one file LibTorch and PyTorch load, or a Hugging Face folder");
  app.add_subcommand("profile",
                     "per layer: parameters, forward and backward FLOPs, measured times and rates");
  app.add_subcommand("plan",
                     "choose the parallel layout, ZeRO stage and micro-batch for a cluster by simulation");
  app.add_subcommand("profile-device", "measure this machine into a device file for troupe simulate");
  app.add_subcommand("simulate",
                     "run the job's schedulers on a simulated cluster: step time, bubble, comm, memory");
  app.add_subcommand("bench",
                     "measure the transport, a collective, the CPU optimizer, the disk or an offloaded step");

  ScheduleArguments schedule_args;
  auto* schedule = app.add_subcommand("schedule", "pipeline schedules");
  schedule->require_subcommand(1);
  auto* show = schedule->add_subcommand("show", "draw a schedule's planned timeline and print its bubble");
  show->add_option("--schedule", schedule_args.schedule,
                   "the schedule (gpipe, 1f1b, interleaved_1f1b, zb_h1, zbv)");
  show->add_option("--pp", schedule_args.pp, "pipeline stages")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  show->add_option("--micro-batches", schedule_args.micro_batches, "micro-batches per step")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  show->add_option("--svg", schedule_args.svg, "also write the timeline as an SVG picture here");
  show->add_option("--virtual-stages", schedule_args.virtual_stages,
                   "model chunks per rank (interleaved_1f1b: any, default 2; zbv: 2)")
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  show->add_flag("--json", schedule_args.json, "one JSON object instead of the picture");
  show->add_flag("--csv", schedule_args.csv, "the schedule as a table for [pipeline] schedule_file");

  CLI11_PARSE(app, argc, argv);

  if (*check) return check_job(check_args, !elsewhere);
  if (*estimate) return print_estimate(estimate_args, estimate_as_json);
  if (*show) return show_schedule(schedule_args);
  if (*launch) {
    LaunchOptions options;
    options.ranks = launch_ranks_count;
    options.argv = program;
    options.extra_env = {{"TROUPE_PROGRESS", "relay"}};
    if (const char* given = std::getenv(kTokenVariable); !given || !*given) {
      auto token = random_token();
      if (!token) return report_config_error(token.error());
      options.extra_env.emplace_back(kTokenVariable, *token);
    }
    return launch_ranks(options);
  }
  if (run_args.reference) return exec_core_program(std::vector<std::string>(argv + 1, argv + argc));
  auto job = load_config_file(run_args.file, overrides_of(run_args));
  if (!job) return report_config_error(job.error());
  print_warnings(*job);
  return run_cluster(*job, run_args);
}
