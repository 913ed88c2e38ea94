// `troupe-core`: the part of the `troupe` command line that needs LibTorch and the actors.
// `troupe` (cli/front.cpp) execs it with its own arguments for
//   troupe rank FILE              one rank of the job (what `troupe run` starts)
//   troupe run FILE --reference   the job trained by plain LibTorch in this process
//   troupe bench ...              the benchmarks (and bench-rank, one rank of one)
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "memory/checkpoint_dir.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/config/load.hpp"
#include "runtime/flops_profile.hpp"
#include "runtime/gpt_job.hpp"
#include "runtime/model/hf_checkpoint.hpp"
#include "runtime/parameter_file.hpp"
#include "tools/bench/bench.hpp"
#include "tools/bench/bench_adam.hpp"
#include "tools/bench/bench_nvme.hpp"
#include "tools/bench/bench_offload.hpp"
#include "tools/bench/bench_pipeline.hpp"
#include "tools/cli/core_program.hpp"
#include "tools/cli/job_arguments.hpp"
#include "tools/plan_command.hpp"
#include "tools/profile/device_profile.hpp"
#include "tools/simulate_command.hpp"
#include "transport/process_watch.hpp"

namespace troupe {
namespace {

JobOutputs outputs_of(const JobArguments& a) {
  return JobOutputs{a.metrics_path, a.parameters_path};
}

int train(const JobArguments& a, bool reference) {
  auto job = load_config_file(a.file, overrides_of(a));
  if (!job) {
    std::fprintf(stderr, "troupe: %s\n", job.error().message.c_str());
    return kUsageExitCode;
  }
  return reference ? run_gpt_reference(*job, outputs_of(a)) : run_gpt_rank(*job, outputs_of(a));
}

// `troupe export CKPT --out FILE [--format hf]`: CKPT is a checkpoint folder, or a
// [checkpoint] dir (its newest complete checkpoint).
int export_checkpoint(const std::string& given, const std::string& out, bool hf) {
  std::string folder = given;
  if (auto newest = latest_checkpoint(given); newest && *newest) folder = **newest;
  auto parameters = consolidate_parameters(folder);
  if (!parameters) {
    std::fprintf(stderr, "troupe: export: %s\n", parameters.error().message.c_str());
    return 1;
  }
  if (hf && !parameters->model) {
    std::fprintf(
        stderr,
        "troupe: export: checkpoint %s does not say which model it holds (it predates the manifest's "
        "model entry): --format hf cannot describe it; export --format torch instead\n",
        folder.c_str());
    return 1;
  }
  Status written =
      hf ? write_hf_folder(out, *parameters->model, *parameters) : write_parameter_file(out, *parameters);
  if (!written) {
    std::fprintf(stderr, "troupe: export: %s\n", written.error().message.c_str());
    return 1;
  }
  std::size_t elements = 0;
  for (const auto& v : parameters->values) elements += v.size();
  std::printf("exported %zu parameters (%zu fp32 values) of %s to %s\n", parameters->tensors.size(), elements,
              folder.c_str(), out.c_str());
  return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
  using namespace troupe;
  CLI::App app{"troupe: DeepSpeed-style training as an actor system over UCX", "troupe"};
  app.require_subcommand(1);

  JobArguments run_args;
  auto* run = app.add_subcommand("run", "train the job in this process with plain LibTorch (--reference)");
  add_job_arguments(run, run_args);
  run->add_flag("--reference", run_args.reference, "train in one process with plain LibTorch (no actors)")
      ->required();

  JobArguments rank_args;
  auto* rank =
      app.add_subcommand("rank", "run one rank of the job (rank and world size from the environment)");
  add_job_arguments(rank, rank_args);

  JobArguments profile_args;
  bool profile_json = false;
  int profile_repeats = 5;
  auto* profiler = app.add_subcommand(
      "profile", "per layer: parameters, forward and backward FLOPs, their measured times and rates");
  add_config_arguments(profiler, profile_args);
  profiler->add_flag("--json", profile_json, "one JSON object");
  bool profile_median = false;
  profiler->add_flag("--median", profile_median, "each layer's median pass, not its best");
  profiler->add_option("--repeats", profile_repeats, "timed passes after one warm-up; the best is kept")
      ->check(CLI::Range(1, 1000));
  double profile_warmup_s = 0;
  profiler
      ->add_option("--warmup-seconds", profile_warmup_s,
                   "untimed passes for this long first: the machine under sustained load, as a run meets it")
      ->check(CLI::Range(0.0, 600.0));

  JobArguments simulate_job_args;
  SimulateArguments simulate_args;
  auto* simulate = app.add_subcommand(
      "simulate",
      "run the job's schedulers on a simulated cluster: step time, bubble, exposed communication, memory");
  add_config_arguments(simulate, simulate_job_args);
  simulate->add_option("--cluster", simulate_args.cluster, "the cluster file (TOML; see configs/sim/)")
      ->required();
  simulate->add_option("--trace", simulate_args.trace, "write the timeline as Chrome-trace JSON to PATH");
  simulate->add_flag("--json", simulate_args.json, "one JSON object");
  simulate->add_option("--steps", simulate_args.steps, "steps to simulate")->check(CLI::Range(1, 1000));
  simulate->add_option("--repeats", simulate_args.repeats, "compute = \"measured\": timed passes per layer")
      ->check(CLI::Range(1, 1000));
  simulate
      ->add_option("--warmup-seconds", simulate_args.warmup_s,
                   "compute = \"measured\": untimed passes for this long before the timed ones")
      ->check(CLI::Range(0.0, 600.0));

  JobArguments plan_job_args;
  PlanArguments plan_args;
  auto* planner = app.add_subcommand(
      "plan", "choose dp, pp, tp, ZeRO stage, offload, schedule and micro-batch for a cluster by simulation");
  add_config_arguments(planner, plan_job_args);
  planner->add_option("--cluster", plan_args.simulate.cluster, "the cluster file (TOML; see configs/sim/)")
      ->required();
  planner->add_option("--out", plan_args.out, "where the chosen job goes (default: FILE's name, .plan.toml)");
  planner->add_option("--top", plan_args.top, "layouts listed")->check(CLI::Range(1, 1000));
  planner->add_flag("--json", plan_args.simulate.json,
                    "one JSON object: every layout ranked, refused and pruned");
  planner
      ->add_option("--simulate-top", plan_args.plan.simulate_top, "contenders simulated at most (default 16)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  planner
      ->add_option("--margin", plan_args.plan.margin,
                   "contenders: layouts estimated within this fraction of the best estimate (default 0.10)")
      ->check(CLI::Range(0.0, 100.0));
  planner
      ->add_option("--budget-seconds", plan_args.plan.budget_s,
                   "answer within S seconds with the best found, saying how much was simulated")
      ->check(CLI::PositiveNumber);
  planner->add_flag("--exhaustive", plan_args.plan.exhaustive,
                    "simulate every layout that fits memory (slow)");
  planner->add_option("--threads", plan_args.plan.threads, "simulations at once (default: every core)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  planner
      ->add_option("--repeats", plan_args.simulate.repeats, "compute = \"measured\": timed passes per layer")
      ->check(CLI::Range(1, 1000));
  planner
      ->add_option("--warmup-seconds", plan_args.simulate.warmup_s,
                   "compute = \"measured\": untimed passes for this long before the timed ones")
      ->check(CLI::Range(0.0, 600.0));

  DeviceProfileOptions device_options;
  auto* profile_device = app.add_subcommand(
      "profile-device", "measure this machine into a device file for troupe simulate (--json)");
  profile_device->add_flag("--json", device_options.json, "the device file: one JSON object");
  profile_device->add_flag("--quick", device_options.quick, "smaller sizes: seconds, not minutes");
  profile_device->add_option("--nvme-dir", device_options.nvme_dir,
                             "a directory on the NVMe device to measure");
  profile_device->add_option("--threads", device_options.threads, "compute threads (default: every core)")
      ->check(CLI::Range(1, 4096));

  std::string export_from, export_to, export_format = "torch";
  auto* exporter = app.add_subcommand(
      "export",
      "write a checkpoint's parameters as one file LibTorch and PyTorch load (torch.load), or as a "
      "Hugging Face folder");
  exporter->add_option("CKPT", export_from, "a checkpoint folder, or a [checkpoint] dir (its newest)")
      ->required();
  exporter
      ->add_option("--out", export_to,
                   "the file to write (a dict of name -> fp32 tensor), or with --format hf the folder")
      ->required();
  exporter
      ->add_option("--format", export_format,
                   "torch (torch.save's file) or hf (config.json and model.safetensors, which "
                   "from_pretrained loads)")
      ->check(CLI::IsMember({"torch", "hf"}));

  BenchOptions bench_options;
  auto* bench =
      app.add_subcommand("bench", "measure the transport or a collective across processes of this machine");
  auto add_bench_options = [&](CLI::App* command) {
    command
        ->add_option("KIND", bench_options.kind,
                     "transport | allreduce | reduce_scatter | allgather | rtt | hop")
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
    command->add_flag("--beside-compute", bench_options.beside_compute,
                      "collectives: each rank keeps a core busy meanwhile, as its compute would");
  };
  add_bench_options(bench);
  bench
      ->add_option("--ranks", bench_options.ranks,
                   "processes (transport always uses 2; rtt and hop: 2 take turns, the others compute)")
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
  bench_nvme->add_flag("--buffered", nvme_bench.buffered,
                       "measure buffered I/O through the page cache (default: O_DIRECT, or refuse)");
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
  bench_offload->add_option("--block-size", offload_bench.block_size,
                            "bytes per I/O request (4 KiB multiple)");
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
  // `troupe bench pipeline`: the measured bubble beside the formula's.
  PipelineBenchOptions pipeline_bench;
  auto* bench_pipeline =
      bench->add_subcommand("pipeline", "the pipeline's measured bubble beside its formula's");
  auto add_pipeline_options = [&](CLI::App* command) {
    command->add_option("--pp", pipeline_bench.pp, "stages (default 2)")->check(CLI::Range(2, 16));
    command->add_option("--micro-batches", pipeline_bench.micro_batches, "micro-batches per step (default 8)")
        ->check(CLI::Range(1, 1024));
    command
        ->add_option("--schedule", pipeline_bench.schedule,
                     "gpipe, 1f1b (default), zb_h1, interleaved_1f1b or zbv")
        ->check(CLI::IsMember({"gpipe", "1f1b", "zb_h1", "interleaved_1f1b", "zbv"}));
    command->add_option("--steps", pipeline_bench.steps, "measured steps after 2 warm-up steps (default 6)")
        ->check(CLI::Range(1, 1000));
    command
        ->add_option("--layer-ms", pipeline_bench.layer_ms,
                     "each chunk's forward time, and each half of its backward's")
        ->check(CLI::Range(0.1, 10000.0));
    command->add_option("--dp", pipeline_bench.dp, "replicas of the pipeline (default 1): pp x dp ranks")
        ->check(CLI::Range(1, 16));
    command->add_flag("--spin", pipeline_bench.spin,
                      "layers keep a core busy for their time instead of sleeping, as compute does");
    command
        ->add_option("--bytes", pipeline_bench.bytes,
                     "bytes of the activation a stage passes on (default 64)")
        ->check(CLI::Range(int64_t{4}, int64_t{1} << 30));
    command->add_option("--trace", pipeline_bench.trace_path, "write the run's Perfetto trace");
    command->add_option("--job", pipeline_bench.job_path,
                        "run this job's own model (its [model] GPT, batch, parallelism and schedule) "
                        "instead of timed layers; prints the plan at the passes' measured costs too");
    command->add_option("--set", pipeline_bench.sets,
                        "with --job: override a key, section.key=value (repeatable)");
    command->add_flag("--json", pipeline_bench.json,
                      "one JSON object with bubble, bubble_formula and the waited hops' median hop_ms");
  };
  add_pipeline_options(bench_pipeline);
  // With --job the job gives the shape and schedule: timed layers' options would go unused.
  CLI::Option* job_option = bench_pipeline->get_option("--job");
  for (const char* timed :
       {"--pp", "--dp", "--micro-batches", "--schedule", "--layer-ms", "--spin", "--bytes"})
    job_option->excludes(bench_pipeline->get_option(timed));
  bench_pipeline->get_option("--set")->needs(job_option);
  auto* bench_pipeline_rank = app.add_subcommand("bench-pipeline-rank", "");  // hidden: one rank of it
  bench_pipeline_rank->group("");
  add_pipeline_options(bench_pipeline_rank);
  bench->get_option("KIND")->required(false);

  CLI11_PARSE(app, argc, argv);

  if (*exporter) return export_checkpoint(export_from, export_to, export_format == "hf");
  if (*profiler) {
    auto job = load_config_file(profile_args.file, overrides_of(profile_args));
    if (!job) {
      std::fprintf(stderr, "troupe: %s\n", job.error().message.c_str());
      return kUsageExitCode;
    }
    return run_flops_profile(*job, profile_repeats, profile_json, profile_median, profile_warmup_s);
  }
  if (*planner) {
    auto job = load_config_file(plan_job_args.file, overrides_of(plan_job_args));
    if (!job) {
      std::fprintf(stderr, "troupe: %s\n", job.error().message.c_str());
      return kUsageExitCode;
    }
    plan_args.simulate.file = plan_job_args.file;
    plan_args.simulate.overrides = plan_job_args.overrides;
    plan_args.simulate.program = self_program_path();
    return run_plan(*job, plan_args);
  }
  if (*profile_device) {
    device_options.program = self_program_path();
    return run_device_profile(device_options);
  }
  if (*simulate) {
    auto job = load_config_file(simulate_job_args.file, overrides_of(simulate_job_args));
    if (!job) {
      std::fprintf(stderr, "troupe: %s\n", job.error().message.c_str());
      return kUsageExitCode;
    }
    simulate_args.file = simulate_job_args.file;
    simulate_args.overrides = simulate_job_args.overrides;
    simulate_args.program = self_program_path();
    return run_simulate(*job, simulate_args);
  }
  if (*bench_nvme) return run_bench_nvme(nvme_bench);
  if (*bench_offload) return run_offload_bench(offload_bench);
  if (*bench_adam) return run_bench_adam(adam_bench);
  if (*bench_pipeline) return run_pipeline_bench(pipeline_bench, self_program_path());
  if (*bench_pipeline_rank) return run_pipeline_bench_rank(pipeline_bench);
  if (*bench && bench_options.kind.empty()) {
    std::fprintf(
        stderr,
        "troupe: bench needs a KIND (transport, allreduce, reduce_scatter, allgather, rtt, hop) or one "
        "of adam, nvme, offload, pipeline (see troupe bench --help)\n");
    return kUsageExitCode;
  }
  if (*bench) return run_bench(bench_options, self_program_path());
  if (*bench_rank) return run_bench_rank(bench_options);
  if (*rank) {
    install_termination_report();  // a launcher's SIGTERM after a rank died names it
    return train(rank_args, false);
  }
  if (*run) return train(run_args, true);
  return kUsageExitCode;
}
