// `troupe`: the command line. Every subcommand is a thin client of the runtime:
//   troupe run FILE      start world_size ranks of the job on this machine
//   troupe rank FILE     run one rank (under any launcher)
//   troupe check FILE    validate the job and print it resolved
//   troupe estimate FILE predict the model-state bytes each rank will hold
//   troupe launch --ranks N -- PROGRAM ARGS...   start N ranks of any program
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/bench.hpp"
#include "runtime/bench_adam.hpp"
#include "runtime/bench_nvme.hpp"
#include "runtime/bench_offload.hpp"
#include "runtime/config/load.hpp"
#include "runtime/config/render.hpp"
#include "runtime/coordinator.hpp"
#include "runtime/estimate.hpp"
#include "runtime/gpt_job.hpp"
#include "runtime/launch/launcher.hpp"

namespace troupe {
namespace {

constexpr int usage_exit_code = 2;

struct JobArguments {
  std::string file;
  std::vector<std::string> overrides;
  JobOutputs outputs;
  bool reference = false;
};

void add_job_arguments(CLI::App* command, JobArguments& a) {
  command->add_option("FILE", a.file, "job configuration (TOML)")->required();
  command->add_option("--set", a.overrides, "override a key: section.key=value (repeatable)");
  command->add_option("--metrics", a.outputs.metrics_path, "write one JSON line per step to PATH");
  command->add_option("--parameters-out", a.outputs.parameters_path,
                      "write the final parameters to PATH as raw float32");
}

std::string self_path() {
  char buffer[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : "troupe";
}

Result<JobConfig> load(const JobArguments& a) {
  return load_config_file(a.file, a.overrides);
}

int report_config_error(const Error& e) {
  std::fprintf(stderr, "troupe: %s\n", e.message.c_str());
  return usage_exit_code;
}

// Starts world_size copies of `troupe rank` with the same arguments.
int run_cluster(const JobConfig& job, const JobArguments& a) {
  if (job.cluster.world_size > 1) {
    auto address = parse_host_port(job.cluster.coordinator, "[cluster] coordinator");
    if (!address) return report_config_error(address.error());
    auto free = check_port_free(*address);
    if (!free) return report_config_error(free.error());
  }
  LaunchOptions launch;
  launch.ranks = job.cluster.world_size;
  launch.argv = {self_path(), "rank", a.file};
  for (const auto& o : a.overrides) launch.argv.insert(launch.argv.end(), {"--set", o});
  if (!a.outputs.metrics_path.empty())
    launch.argv.insert(launch.argv.end(), {"--metrics", a.outputs.metrics_path});
  if (!a.outputs.parameters_path.empty())
    launch.argv.insert(launch.argv.end(), {"--parameters-out", a.outputs.parameters_path});
  launch.extra_env = {{"TROUPE_PROGRESS", "relay"}};
  return launch_ranks(launch);
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
  using namespace troupe;
  CLI::App app{"troupe: DeepSpeed-style training as an actor system over UCX"};
  app.require_subcommand(1);

  JobArguments run_args;
  auto* run = app.add_subcommand("run", "train the job: start its ranks on this machine");
  add_job_arguments(run, run_args);
  run->add_flag("--reference", run_args.reference, "train in one process with plain LibTorch (no actors)");

  JobArguments rank_args;
  auto* rank =
      app.add_subcommand("rank", "run one rank of the job (rank and world size from the environment)");
  add_job_arguments(rank, rank_args);

  JobArguments check_args;
  auto* check = app.add_subcommand("check", "validate the job and print the resolved configuration");
  check->add_option("FILE", check_args.file, "job configuration (TOML)")->required();
  check->add_option("--set", check_args.overrides, "override a key: section.key=value (repeatable)");

  JobArguments estimate_args;
  bool estimate_as_json = false;
  auto* estimate = app.add_subcommand(
      "estimate", "predict the bytes each rank will hold: parameters, gradients, optimizer state, buffers");
  estimate->add_option("FILE", estimate_args.file, "job configuration (TOML)")->required();
  estimate->add_option("--set", estimate_args.overrides, "override a key: section.key=value (repeatable)");
  estimate->add_flag("--json", estimate_as_json, "one JSON object instead of the table");

  int64_t launch_ranks_count = 1;
  std::vector<std::string> program;
  auto* launch =
      app.add_subcommand("launch", "start N ranks of any program (e.g. a trainer embedding troupe)");
  launch->add_option("--ranks,-n", launch_ranks_count, "number of ranks")
      ->required()
      ->check(CLI::Range(1, 1024));
  launch->add_option("PROGRAM", program, "program and its arguments (after --)")->required();

  BenchOptions bench_options;
  auto* bench =
      app.add_subcommand("bench", "measure the transport or a collective across processes of this machine");
  auto add_bench_options = [&](CLI::App* command) {
    command
        ->add_option("KIND", bench_options.kind, "transport | allreduce | reduce_scatter | allgather | rtt")
        ->required()
        ->check(CLI::IsMember(bench_kinds()));
    command
        ->add_option("--bytes", bench_options.bytes,
                     "size to measure (repeatable); default 1 KiB to 256 MiB, x4")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 34));
    command->add_flag("--json", bench_options.json, "one JSON line per size");
    command->add_option("--seconds", bench_options.seconds_per_size, "measuring time per size")
        ->check(CLI::Range(0.01, 600.0));
    command->add_option("--window", bench_options.window, "transport: messages in flight")
        ->check(CLI::Range(1, 1024));
  };
  add_bench_options(bench);
  bench->add_option("--ranks", bench_options.ranks, "processes (transport always uses 2)")
      ->check(CLI::Range(2, 64));
  auto* bench_rank = app.add_subcommand("bench-rank", "");  // one rank of `troupe bench` (hidden)
  bench_rank->group("");
  add_bench_options(bench_rank);
  // `troupe bench nvme` is a subcommand of bench with its own options, so bench's KIND is optional.
  NvmeBenchOptions nvme_bench;
  auto* bench_nvme =
      bench->add_subcommand("nvme", "sequential write then read of one file through the NVMe tier");
  bench_nvme->add_option("--dir", nvme_bench.dir, "directory on the device to measure")->required();
  bench_nvme->add_option("--bytes", nvme_bench.bytes, "bytes written, then read (default 1 GiB)")
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 36));
  bench_nvme->add_option("--block-size", nvme_bench.block_size, "bytes per request (default 1 MiB)")
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 30));
  bench_nvme->add_option("--queue-depth", nvme_bench.queue_depth, "requests in flight (default 32)")
      ->check(CLI::Range(1, 1024));
  bench_nvme->add_flag("--json", nvme_bench.json, "one JSON object per direction");
  // `troupe bench offload`: an optimizer step with its state on NVMe against its bounds.
  OffloadBenchOptions offload_bench;
  auto* bench_offload = bench->add_subcommand(
      "offload", "an AdamW step with its state on NVMe, against the step in memory and the disk's own speed");
  bench_offload->add_option("--dir", offload_bench.dir, "directory of the nvme tier")->required();
  bench_offload->add_option("--params", offload_bench.params,
                            "fp32 parameters of the partition (default 2^24)");
  bench_offload->add_option("--iters", offload_bench.iters, "timed passes after one warm-up (median)");
  bench_offload->add_option("--sub-group-size", offload_bench.sub_group_size, "elements swapped together");
  bench_offload->add_option("--buffer-count", offload_bench.buffer_count, "swap buffers in flight");
  bench_offload->add_option("--queue-depth", offload_bench.queue_depth, "I/O requests in flight");
  bench_offload->add_option("--threads", offload_bench.threads, "threads of the optimizer kernel");
  bench_offload->add_option("--trace", offload_bench.trace_path, "write a Perfetto trace of the nvme passes");
  bench_offload->add_flag("--json", offload_bench.json, "one JSON object");
  // `troupe bench adam`: the fused CPU optimizer step, in this process (no ranks).
  AdamBenchOptions adam_bench;
  auto* bench_adam = bench->add_subcommand("adam", "time the fused CPU AdamW step (fp32) in this process");
  bench_adam->add_option("--params", adam_bench.params, "fp32 parameters (default 2^26)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34));
  bench_adam->add_option("--iters", adam_bench.iters, "timed steps after one warm-up; the best is reported")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  bench_adam
      ->add_option("--threads", adam_bench.threads,
                   "threads per step (default: every hardware thread, as DeepSpeed's CPU Adam)")
      ->check(CLI::Range(1, 64));
  bench_adam->add_flag("--json", adam_bench.json, "one JSON object");
  bench_adam->add_option("--device", adam_bench.device, "cpu (the fused CPU kernel) or cuda (GPU 0)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  bench->get_option("KIND")->required(false);

  CLI11_PARSE(app, argc, argv);

  if (*bench_nvme) return run_bench_nvme(nvme_bench);
  if (*bench_offload) return run_offload_bench(offload_bench);
  if (*bench_adam) return run_bench_adam(adam_bench);
  if (*bench && bench_options.kind.empty()) {
    std::fprintf(stderr,
                 "troupe: bench needs a KIND (transport, allreduce, reduce_scatter, allgather, rtt) or one "
                 "of adam, nvme, offload (see troupe bench --help)\n");
    return usage_exit_code;
  }
  if (*bench) return run_bench(bench_options, self_path());
  if (*bench_rank) return run_bench_rank(bench_options);

  if (*check) {
    auto job = load(check_args);
    if (!job) return report_config_error(job.error());
    std::printf("%s", render_config(*job).c_str());
    return 0;
  }
  if (*estimate) {
    auto job = load(estimate_args);
    if (!job) return report_config_error(job.error());
    auto predicted = estimate_job(*job);
    if (!predicted) return report_config_error(predicted.error());
    std::string text = estimate_as_json ? estimate_json(*predicted) + "\n" : render_estimate(*predicted);
    std::printf("%s", text.c_str());
    return 0;
  }
  if (*launch) {
    LaunchOptions options;
    options.ranks = launch_ranks_count;
    options.argv = program;
    options.extra_env = {{"TROUPE_PROGRESS", "relay"}};
    return launch_ranks(options);
  }
  JobArguments& a = *run ? run_args : rank_args;
  auto job = load(a);
  if (!job) return report_config_error(job.error());
  if (*rank) return run_gpt_rank(*job, a.outputs);
  if (a.reference) return run_gpt_reference(*job, a.outputs);
  return run_cluster(*job, a);
}
