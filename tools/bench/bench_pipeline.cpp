#include "tools/bench/bench_pipeline.hpp"

#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/deferred_weights.hpp"
#include "base/median.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"
#include "runtime/config/load.hpp"
#include "runtime/config/resolve.hpp"
#include "runtime/gpt_job.hpp"
#include "runtime/launch/environment.hpp"
#include "runtime/launch/launcher.hpp"
#include "sim/trace_hops.hpp"
#include "sim/trace_passes.hpp"
#include "tools/bench/bench.hpp"
#include "troupe/troupe.hpp"

namespace troupe {
namespace {

constexpr int64_t kWarmUpSteps = 2;

// A layer's time: asleep, or keeping its core busy as compute would.
void take(double ms, bool spin) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  if (!spin) return std::this_thread::sleep_until(until);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// y = x ⊙ w, taking `ms` in forward, `ms` for the gradient of x and `ms` for the gradient
// of w: a layer of controlled cost whose forward and backward halves cost the same, as
// the zero-bubble schedules' formulas assume. A split backward (actors/deferred_weights.hpp)
// defers the gradient of w to the weight half.
struct TimedProduct : public torch::autograd::Function<TimedProduct> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor w,
                               double ms, bool spin) {
    take(ms, spin);
    ctx->save_for_backward({x, w});
    ctx->saved_data["ms"] = ms;
    ctx->saved_data["spin"] = spin;
    return x * w;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradient) {
    const double ms = ctx->saved_data["ms"].toDouble();
    const bool spin = ctx->saved_data["spin"].toBool();
    take(ms, spin);
    auto saved = ctx->get_saved_variables();
    auto weight_gradient = [x = saved[0], g = gradient[0], ms, spin] {
      take(ms, spin);
      return (g * x).sum(0);
    };
    if (DeferredWeights* deferred = DeferredWeights::active()) {
      deferred->defer([w = saved[1], weight_gradient] {
        return std::vector<std::pair<torch::Tensor, torch::Tensor>>{{w, weight_gradient()}};
      });
      return {gradient[0] * saved[1], torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    return {gradient[0] * saved[1], weight_gradient(), torch::Tensor(), torch::Tensor()};
  }
};

class TimedLayerImpl : public torch::nn::Module {
 public:
  TimedLayerImpl(double ms, bool spin, int64_t width) : ms_(ms), spin_(spin) {
    weight_ = register_parameter("weight", torch::ones({width}));
  }
  torch::Tensor forward(torch::Tensor x) { return TimedProduct::apply(x, weight_, ms_, spin_); }

 private:
  double ms_;
  bool spin_;
  torch::Tensor weight_;
};
TORCH_MODULE(TimedLayer);

JobConfig bench_job(const PipelineBenchOptions& o, const RankEnvironment& rank) {
  JobConfig job;
  job.source = "troupe bench pipeline";
  job.cluster.world_size = o.pp * o.dp;
  job.cluster.coordinator = rank.coordinator;
  job.parallel.pp = o.pp;
  job.parallel.dp = o.dp;
  job.pipeline.schedule = o.schedule;
  job.batch.micro_batch_size = 1;
  job.batch.gradient_accumulation_steps = o.micro_batches;
  job.batch.global_batch_size = o.micro_batches * o.dp;
  job.optimizer.type = OptimizerType::sgd;
  job.optimizer.lr = 1e-3;
  job.optimizer.weight_decay = 0;
  job.train.threads = 1;
  job.trace.path = o.trace_path;
  return job;
}

// Floats per sample: a micro-batch of one sample is the activation of `bytes`.
int64_t width_of(const PipelineBenchOptions& o) {
  return std::max<int64_t>(1, o.bytes / 4);
}

Trainable timed_model(const PipelineBenchOptions& o) {
  Trainable t;
  const int64_t width = width_of(o);
  t.layers = torch::nn::Sequential();
  // One layer per chunk: pp of them, times the schedule's virtual stages.
  const int64_t chunks = o.pp * pipeline::default_virtual_stages(o.schedule);
  for (int64_t s = 0; s < chunks; ++s) t.layers->push_back(TimedLayer(o.layer_ms, o.spin, width));
  t.loss = [](const torch::Tensor& out, const torch::Tensor& target) { return torch::mse_loss(out, target); };
  t.data = [width](int64_t, int64_t count) {
    return MicroBatch{torch::ones({count, width}), torch::zeros({count, width})};
  };
  return t;
}

nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

// The median hop a stage waited on in the run's merged trace, in ms (0 when none waited),
// and how many there were.
std::pair<double, std::size_t> waited_hops(const nlohmann::json& trace, int64_t pp,
                                           const std::string& schedule) {
  if (trace.is_discarded()) return {0, 0};
  std::vector<double> hops = sim::critical_hops_ms(trace, pp, schedule == "interleaved_1f1b");
  const std::size_t count = hops.size();
  return {upper_median(std::move(hops)), count};
}

std::pair<double, std::size_t> waited_hops(const PipelineBenchOptions& o) {
  return waited_hops(read_trace(o.trace_path), o.pp, o.schedule);
}

int failed(const std::string& message) {
  std::fprintf(stderr, "troupe: bench pipeline: %s\n", message.c_str());
  return 1;
}

// The means over the measured steps.
struct Measured {
  double bubble = 0, step_ms = 0, tokens_per_s = 0;
};

// Trains kWarmUpSteps + `steps` steps and finishes the engine; the figures of the last `steps`.
Result<Measured> train_and_measure(Engine& engine, int64_t steps) {
  Measured m;
  double tokens = 0, seconds = 0;
  for (int64_t s = 0; s < kWarmUpSteps + steps; ++s) {
    auto r = engine.train_batch();
    if (!r) return r.error();
    if (s < kWarmUpSteps) continue;
    m.bubble += r->stats.bubble / static_cast<double>(steps);
    m.step_ms += r->step_ms / static_cast<double>(steps);
    tokens += static_cast<double>(r->tokens);
    seconds += r->step_ms / 1e3;
  }
  m.tokens_per_s = seconds > 0 ? tokens / seconds : 0;
  TROUPE_TRY(engine.finish());
  return m;
}

void report(const PipelineBenchOptions& o, const Measured& measured) {
  const double bubble = measured.bubble, step_ms = measured.step_ms;
  const double formula = pipeline::bubble_formula(
      o.schedule, {o.pp, o.micro_batches, pipeline::default_virtual_stages(o.schedule)});
  const auto [hop_ms, hops] = waited_hops(o);
  if (o.json) {
    nlohmann::ordered_json line{{"bench", "pipeline"},
                                {"pp", o.pp},
                                {"dp", o.dp},
                                {"micro_batches", o.micro_batches},
                                {"schedule", o.schedule},
                                {"layer_ms", o.layer_ms},
                                {"spin", o.spin},
                                {"bytes", width_of(o) * 4},
                                {"steps", o.steps},
                                {"bubble", bubble},
                                {"bubble_formula", formula},
                                {"step_ms", step_ms},
                                {"hop_ms", hop_ms},
                                {"hops", hops}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf(
        "pipeline  pp %lld x dp %lld  m %lld  %s  bubble %.4f  formula %.4f  step %.1f ms  hop %.2f ms "
        "(median of %zu)\n",
        static_cast<long long>(o.pp), static_cast<long long>(o.dp), static_cast<long long>(o.micro_batches),
        o.schedule.c_str(), bubble, formula, step_ms, hop_ms, hops);
  }
  std::fflush(stdout);
}

// The job's measured figures beside its schedule's plan at unit costs and at the costs its
// passes measured.
void report_job(const PipelineBenchOptions& o, const JobConfig& job, const Measured& measured) {
  const pipeline::ScheduleShape shape{job.parallel.pp, job.batch.gradient_accumulation_steps,
                                      pipeline_chunks(job)};
  const std::string& schedule = job.pipeline.schedule;
  const nlohmann::json trace = read_trace(o.trace_path);
  const sim::PassCosts costs = trace.is_discarded() ? sim::PassCosts{} : sim::pass_costs(trace, kWarmUpSteps);
  auto programs = pipeline::make_programs(schedule, shape);
  auto unit = programs
                  ? pipeline::simulate(*programs, pipeline::layout_of(schedule, shape), shape.micro_batches)
                  : Result<pipeline::Simulation>(programs.error());
  auto at_costs = sim::planned_bubble(schedule, shape, costs);
  const double plan_unit = unit ? unit->bubble() : -1, plan_measured = at_costs ? *at_costs : -1;
  const auto [hop_ms, hops] = waited_hops(trace, job.parallel.pp, schedule);
  if (o.json) {
    nlohmann::ordered_json line{{"bench", "pipeline"},
                                {"job", o.job_path},
                                {"schedule", schedule},
                                {"pp", job.parallel.pp},
                                {"dp", job.parallel.dp},
                                {"virtual_stages", shape.virtual_stages},
                                {"micro_batches", shape.micro_batches},
                                {"steps", o.steps},
                                {"bubble", measured.bubble},
                                {"bubble_plan", plan_unit},
                                {"bubble_plan_measured_costs", plan_measured},
                                {"forward_ms", costs.forward_ms},
                                {"backward_ms", costs.backward_ms},
                                {"input_ms", costs.input_ms},
                                {"weight_ms", costs.weight_ms},
                                {"step_ms", measured.step_ms},
                                {"tokens_per_s", measured.tokens_per_s},
                                {"hop_ms", hop_ms},
                                {"hops", hops}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf(
        "pipeline  %s  pp %lld x dp %lld  v %lld  m %lld  %s\n"
        "  bubble %.4f  plan %.4f at unit costs, %.4f at the measured costs "
        "(F %.1f ms, B %.1f, I %.1f, W %.1f)\n"
        "  step %.1f ms  %.0f tokens/s  hop %.2f ms (median of %zu)\n",
        o.job_path.c_str(), static_cast<long long>(job.parallel.pp), static_cast<long long>(job.parallel.dp),
        static_cast<long long>(shape.virtual_stages), static_cast<long long>(shape.micro_batches),
        schedule.c_str(), measured.bubble, plan_unit, plan_measured, costs.forward_ms, costs.backward_ms,
        costs.input_ms, costs.weight_ms, measured.step_ms, measured.tokens_per_s, hop_ms, hops);
  }
  std::fflush(stdout);
}

// One rank of the job's own model: the GPT of its [model], trained kWarmUpSteps + steps.
int run_job_rank(const PipelineBenchOptions& o, const RankEnvironment& env) {
  auto job = load_config_file(o.job_path, o.sets);
  if (!job) return failed(job.error().message);
  job->cluster.coordinator = env.coordinator;
  job->trace.path = o.trace_path;
  job->train.steps = kWarmUpSteps + o.steps;
  auto trainable = make_gpt_trainable(*job);
  if (!trainable) return failed(trainable.error().message);
  auto engine = Engine::make(*job, std::move(*trainable), env);
  if (!engine) return failed(engine.error().message);
  auto measured = train_and_measure(**engine, o.steps);
  if (!measured) return failed(measured.error().message);
  if ((*engine)->rank() == 0) report_job(o, *job, *measured);
  return 0;
}

}  // namespace

int run_pipeline_bench(const PipelineBenchOptions& o, const std::string& troupe_program) {
  int port = free_port();
  if (port == 0) return failed("no free port on 127.0.0.1 for the coordinator");
  // The hops are read from the run's trace: one of its own where none was asked for.
  const bool own_trace = o.trace_path.empty();
  const std::string trace =
      own_trace
          ? (std::filesystem::temp_directory_path() / fmt::format("troupe-bench-pipeline-{}.json", getpid()))
                .string()
          : o.trace_path;
  LaunchOptions launch;
  launch.ranks = o.pp * o.dp;
  if (!o.job_path.empty()) {
    auto job = load_config_file(o.job_path, o.sets);
    if (!job) return failed(job.error().message);
    if (job->parallel.pp < 2)
      return failed(
          fmt::format("{} has [parallel] pp = {}; a pipeline needs 2 or more", o.job_path, job->parallel.pp));
    launch.ranks = job->cluster.world_size;
  }
  launch.argv = {troupe_program,
                 "bench-pipeline-rank",
                 "--pp",
                 std::to_string(o.pp),
                 "--dp",
                 std::to_string(o.dp),
                 "--bytes",
                 std::to_string(o.bytes),
                 "--micro-batches",
                 std::to_string(o.micro_batches),
                 "--schedule",
                 o.schedule,
                 "--steps",
                 std::to_string(o.steps),
                 "--layer-ms",
                 fmt::format("{}", o.layer_ms),
                 "--trace",
                 trace};
  if (o.spin) launch.argv.push_back("--spin");
  if (o.json) launch.argv.push_back("--json");
  if (!o.job_path.empty()) launch.argv.insert(launch.argv.end(), {"--job", o.job_path});
  for (const std::string& set : o.sets) launch.argv.insert(launch.argv.end(), {"--set", set});
  launch.prefix_stdout = false;  // only rank 0 prints the result
  launch.extra_env = {{"TROUPE_COORDINATOR", fmt::format("127.0.0.1:{}", port)}};
  const int code = launch_ranks(launch);
  if (own_trace) {
    std::error_code ignored;
    std::filesystem::remove(trace, ignored);
  }
  return code;
}

int run_pipeline_bench_rank(const PipelineBenchOptions& o) {
  auto env = detect_rank_environment(process_environment());
  if (!env || !*env) {
    std::fprintf(stderr,
                 "troupe: bench-pipeline-rank runs under `troupe bench pipeline`, which sets its rank\n");
    return 2;
  }
  if (!o.job_path.empty()) return run_job_rank(o, **env);
  torch::manual_seed(1);
  auto engine = Engine::make(bench_job(o, **env), timed_model(o), **env);
  if (!engine) return failed(engine.error().message);
  auto measured = train_and_measure(**engine, o.steps);
  if (!measured) return failed(measured.error().message);
  if ((*engine)->rank() == 0) report(o, *measured);
  return 0;
}

}  // namespace troupe
