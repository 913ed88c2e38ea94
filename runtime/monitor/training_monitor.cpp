#include "runtime/monitor/training_monitor.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "actors/monitor.hpp"
#include "runtime/monitor/csv_sink.hpp"
#include "runtime/monitor/tensorboard_sink.hpp"

namespace troupe {
namespace {

// The monitor's own actor system: one scheduler thread is plenty for one actor whose work
// runs on its stream, and it sleeps when idle (a work-stealing worker polls, taking cycles
// from the rank's compute: 18% more wall time for the tiny GPT on 2 vCPUs).
struct MonitorSystemConfig : caf::actor_system_config {
  MonitorSystemConfig() {
    set("scheduler.max-threads", 1);
    set("scheduler.policy", caf::atom("sharing"));
  }
};

// What the monitor has to say goes to stderr, beside the rank's other errors.
void say(const std::string& what) {
  std::fprintf(stderr, "troupe: monitor: %s\n", what.c_str());
}

double seconds_since_epoch(std::chrono::system_clock::time_point at) {
  return std::chrono::duration<double>(at.time_since_epoch()).count();
}

}  // namespace

struct TrainingMonitor::Impl {
  MonitorSystemConfig config;
  caf::actor_system system{config};
  caf::actor monitor;
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  bool finished = false;
};

TrainingMonitor::TrainingMonitor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TrainingMonitor::~TrainingMonitor() {
  finish();
  impl_->cancelled->store(true);  // whatever finish gave up on is not written on the way out
  caf::anon_send_exit(impl_->monitor, caf::exit_reason::user_shutdown);
  impl_->monitor = nullptr;
}

std::unique_ptr<TrainingMonitor> TrainingMonitor::make(const MonitorConfig& config, int64_t kept_through) {
  MonitorOptions options;
  if (!config.tensorboard.empty())
    options.sinks.push_back(std::make_shared<TensorBoardSink>(config.tensorboard));
  if (!config.csv.empty()) options.sinks.push_back(std::make_shared<CsvSink>(config.csv));
  if (options.sinks.empty()) return nullptr;
  options.queue = config.queue;
  options.kept_through = kept_through;
  options.say = say;
  auto impl = std::make_unique<Impl>();
  options.cancelled = impl->cancelled;
  impl->monitor = spawn_monitor(impl->system, std::move(options));
  return std::unique_ptr<TrainingMonitor>(new TrainingMonitor(std::move(impl)));
}

void TrainingMonitor::record(const StepMetrics& metrics, std::chrono::system_clock::time_point taken) {
  caf::anon_send(impl_->monitor,
                 MonitorRecord{metrics.step, seconds_since_epoch(taken), monitor_scalars(metrics)});
}

void TrainingMonitor::finish(std::chrono::milliseconds bound) {
  if (impl_->finished) return;
  impl_->finished = true;
  caf::scoped_actor self{impl_->system};
  self->request(impl_->monitor, bound, await_monitor{})
      .receive(
          [](const monitor_drained& drained) {
            if (drained.dropped > 0)
              say(fmt::format("{} of {} steps' records were dropped because writing was behind",
                              drained.dropped, drained.dropped + drained.written));
          },
          [&](const caf::error& error) {
            impl_->cancelled->store(true);
            say(error == caf::sec::request_timeout
                    ? fmt::format(
                          "the records were not all written within {} s, and the rest are given up on: "
                          "the files lack the last steps",
                          bound.count() / 1000.0)
                    : "the monitor stopped before writing every record: " + impl_->system.render(error));
          });
}

std::vector<MonitorScalar> monitor_scalars(const StepMetrics& m) {
  std::vector<MonitorScalar> s = {{"train/loss", m.loss}, {"train/lr", m.lr}};
  if (std::isfinite(m.grad_norm) && !m.skipped) s.push_back({"train/grad_norm", m.grad_norm});
  if (m.loss_scale > 0) s.push_back({"train/loss_scale", m.loss_scale});
  s.push_back({"train/skipped", m.skipped ? 1.0 : 0.0});
  if (m.evaluated()) {
    s.push_back({"val/val_loss", m.val_loss});
    s.push_back({"val/val_perplexity", std::exp(m.val_loss)});
  }
  for (const auto& [tag, value] : {std::pair{"perf/tokens_per_s", m.tokens_per_s},
                                   {"perf/step_ms", m.step_ms},
                                   {"perf/bubble", m.bubble}})
    s.push_back({tag, value});
  if (m.step_flops > 0) s.push_back({"perf/mfu", m.mfu});  // a trainer's model of unknown FLOPs: none
  const std::pair<const char*, int64_t> counts[] = {{"perf/sent_bytes", m.sent_bytes},
                                                    {"memory/model_state_bytes", m.model_state_bytes},
                                                    {"memory/parameter_bytes", m.parameter_bytes},
                                                    {"memory/gradient_bytes", m.gradient_bytes},
                                                    {"memory/optimizer_state_bytes", m.optimizer_state_bytes},
                                                    {"memory/communication_bytes", m.communication_bytes},
                                                    {"memory/activation_bytes", m.activation_bytes},
                                                    {"memory/device_bytes", m.device_bytes}};
  for (const auto& [tag, value] : counts) s.push_back({tag, static_cast<double>(value)});
  return s;
}

}  // namespace troupe
