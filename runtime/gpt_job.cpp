#include "runtime/gpt_job.hpp"

#include "runtime/flops_profile.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "actors/model_parameters.hpp"
#include "kernels/devices.hpp"
#include "runtime/console.hpp"
#include "runtime/data/token_data.hpp"
#include "runtime/devices.hpp"
#include "runtime/estimate.hpp"
#include "runtime/host_check.hpp"
#include "runtime/launch/environment.hpp"
#include "runtime/metrics.hpp"
#include "runtime/model/family.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/gpt_tensor_parallel.hpp"
#include "runtime/model/model_flops.hpp"
#include "runtime/model/model_shape.hpp"
#include "runtime/monitor/training_monitor.hpp"
#include "runtime/parameter_file.hpp"
#include "runtime/reference.hpp"
#include "troupe/troupe.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

Status write_parameters(const std::string& path, const torch::Tensor& flat) {
  std::ofstream out(path, std::ios::binary);
  auto contiguous = flat.contiguous();
  out.write(reinterpret_cast<const char*>(contiguous.data_ptr<float>()),
            static_cast<std::streamsize>(contiguous.numel() * sizeof(float)));
  if (!out) return make_error("cannot write parameters to " + path);
  return {};
}

// Rank 0's view of the run: metrics file, progress line, summary.
class Report {
 public:
  // `own_monitor`: [monitor]'s writers are the report's (the reference trainer); an Engine's
  // job has them in the engine.
  static Result<Report> make(const JobConfig& job, const JobOutputs& outputs, bool speaks,
                             int64_t resumed_after = 0, bool own_monitor = false) {
    Report r;
    r.job_ = &job;
    r.speaks_ = speaks;
    r.style_ = progress_style();
    if (speaks && !outputs.metrics_path.empty()) {
      auto writer = MetricsWriter::make(outputs.metrics_path, resumed_after);
      if (!writer) return writer.error();
      r.writer_.emplace(std::move(*writer));
    }
    if (speaks && own_monitor) r.monitor_ = TrainingMonitor::make(job.monitor, resumed_after);
    return r;
  }

  Status step(const StepMetrics& m) {
    history_.push_back(m);
    if (!speaks_) return {};
    if (writer_) TROUPE_TRY(writer_->write(m));
    if (monitor_) monitor_->record(m);
    if (m.step % job_->train.log_interval == 0 || m.step == m.steps_total || m.evaluated())
      show_progress(style_, format_progress(m, seconds()));
    return {};
  }

  void summary() {
    if (!speaks_) return;
    if (monitor_) monitor_->finish();
    end_progress(style_);
    std::printf("%s\n", format_summary(history_, seconds(), job_->trace.path).c_str());
    std::fflush(stdout);
  }

 private:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  const JobConfig* job_ = nullptr;
  bool speaks_ = false;
  ProgressStyle style_ = ProgressStyle::plain;
  std::optional<MetricsWriter> writer_;
  std::unique_ptr<TrainingMonitor> monitor_;  // the reference trainer's [monitor] writers
  std::vector<StepMetrics> history_;
  Clock::time_point start_ = Clock::now();
};

int fail(const std::string& message) {
  std::fprintf(stderr, "troupe: %s\n", message.c_str());
  return 1;
}

}  // namespace

Result<Trainable> make_gpt_trainable(const JobConfig& job) {
  auto data = TokenData::make(job);
  if (!data) return data.error();
  torch::manual_seed(static_cast<uint64_t>(job.train.seed));
  Trainable trainable;
  auto group = Engine::tensor_parallel_group(job);
  if (!group) return group.error();
  if (*group && !job.model.init_from.empty()) {
    // The whole model from [model] init_from, then each rank's shards cut from it.
    torch::nn::Sequential full = make_model(job.model);
    auto named = model_parameters(full);
    if (!named) return named.error();
    TROUPE_TRY(load_initial_parameters(job.model, *named));
    trainable.layers = split_tensor_parallel_model(full, job.model, *group);
    trainable.starts_from_init = true;
  }
  if (*group) {
    if (!trainable.starts_from_init) trainable.layers = make_tensor_parallel_model(job.model, *group);
    trainable.loss = tensor_parallel_gpt_loss(*group);
    trainable.tensor_parallel = *group;
  } else {
    trainable.layers = make_model(job.model);
    trainable.loss = lm_loss;
  }
  trainable.layer_costs = model_layer_costs(job);
  trainable.data = [data = *data](int64_t first, int64_t count) {
    TokenBatch b = data.train(first, count);
    return MicroBatch{b.input, b.target};
  };
  if (job.train.eval_interval > 0 && data->has_validation()) {
    trainable.validation = [data = *data](int64_t first, int64_t count) {
      TokenBatch b = data.validation(first, count);
      return MicroBatch{b.input, b.target};
    };
  }
  return trainable;
}

namespace {

// [cluster] device = "cuda": what the built-in job's estimate puts on this rank's GPU (times
// the ranks sharing it) must fit what the GPU has free, before the model moves there. A
// machine without a usable GPU is left to the engine, which names the key.
Status check_gpu_memory(const JobConfig& job) {
  if (job.cluster.device != DeviceKind::cuda) return {};
  auto count = kernels::cuda_device_count();
  auto detected = detect_rank_environment(process_environment());
  if (!count || *count < 1 || !detected) return {};
  const RankEnvironment rank = detected->value_or(RankEnvironment{0, 1, 0, 1, "", "single process", ""});
  const int gpu = gpu_of(rank.local_rank, *count);
  auto memory = kernels::cuda_memory(gpu);
  if (!memory) return {};
  int64_t sharing = 1;  // the local ranks on this GPU: local rank modulo the count
  if (job.cluster.share_gpus) sharing = (rank.local_world_size - gpu + *count - 1) / *count;
  // Shared, the other ranks may have taken some of it already: the job is held to the whole
  // card, every rank's share counted once.
  const int64_t room = sharing > 1 ? memory->total_bytes : memory->free_bytes;
  if (Status fits = check_fits_device(job, room, sharing, fmt::format("GPU {}", gpu)); !fits)
    return make_error(fmt::format("rank {}: {}", rank.rank, fits.error().message));
  return {};
}

int train_rank(const JobConfig& job, const JobOutputs& outputs, std::string& phase) {
  // Under any launcher: this rank alone must fit in what the host has left.
  phase = "checking this machine's memory";
  if (auto fits = check_host_memory(job, 1, "this rank"); !fits) return fail(fits.error().message);
  phase = "checking the GPU's memory";
  if (auto fits = check_gpu_memory(job); !fits) return fail(fits.error().message);
  phase = fmt::format("making the corpus ({} bytes) and the model",
                      job.data.path.empty() ? job.data.synthetic_bytes : 0);
  auto trainable = make_gpt_trainable(job);
  if (!trainable) return fail(trainable.error().message);
  trainable->step_flops = model_step_flops(job);  // the engine's MFU
  // The whole model's size, as the summary and the metrics give it, whatever its split.
  const int64_t parameter_count = model_shape(job.model).parameters;
  phase = fmt::format("starting the engine for {} parameters", parameter_count);
  auto engine = Engine::make(job, std::move(*trainable));
  if (!engine) return fail(engine.error().message);
  Engine& e = **engine;
  auto report = Report::make(job, outputs, e.rank() == 0, e.steps_done());
  if (!report) return fail(report.error().message);
  for (int64_t s = e.steps_done(); s < job.train.steps; ++s) {  // a resumed run starts later
    phase = fmt::format("training step {}", s + 1);
    auto r = e.train_batch();
    if (!r) return fail(r.error().message);
    StepMetrics m = step_metrics(*r, job.train.steps);
    m.params = parameter_count;
    if (job.train.eval_interval > 0 && r->step % job.train.eval_interval == 0) {
      phase = fmt::format("validating after step {}", r->step);
      auto val = e.evaluate();
      if (!val) return fail(val.error().message);
      m.val_loss = *val;
    }
    auto written = report->step(m);
    if (!written) return fail(written.error().message);
  }
  phase = "finishing";
  auto finished = e.finish();
  if (!finished) return fail(finished.error().message);
  report->summary();
  if (!outputs.parameters_path.empty()) {
    auto parameters = e.gather_parameters();  // every rank takes part
    if (!parameters) return fail(parameters.error().message);
    if (e.rank() == 0) {
      auto saved = write_parameters(outputs.parameters_path, *parameters);
      if (!saved) return fail(saved.error().message);
    }
  }
  return 0;
}

}  // namespace

int run_gpt_rank(const JobConfig& job, const JobOutputs& outputs) {
  // Memory that runs out is reported with what was being done, never as an abort.
  std::string phase = "starting";
  try {
    return train_rank(job, outputs, phase);
  } catch (const std::bad_alloc&) {
    return fail(fmt::format("out of memory while {}", phase));
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    return fail(fmt::format("while {}: {}", phase, what.substr(0, what.find('\n'))));
  }
}

int run_gpt_reference(const JobConfig& job, const JobOutputs& outputs) {
  auto report = Report::make(job, outputs, true, 0, /*own_monitor=*/true);
  if (!report) return fail(report.error().message);
  Status step_status;
  torch::Tensor parameters;
  auto result = train_reference(
      job,
      [&](const StepMetrics& m) {
        if (step_status.ok()) step_status = report->step(m);
      },
      outputs.parameters_path.empty() ? nullptr : &parameters);
  if (!result) return fail(result.error().message);
  if (!step_status) return fail(step_status.error().message);
  report->summary();
  if (!outputs.parameters_path.empty()) {
    auto saved = write_parameters(outputs.parameters_path, parameters);
    if (!saved) return fail(saved.error().message);
  }
  return 0;
}

}  // namespace troupe
