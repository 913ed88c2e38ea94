// Rank 0's monitor of a job: the writers [monitor] names (TensorBoard's event files,
// DeepSpeed's CSV files), behind the monitor actor (actors/monitor.hpp), fed one
// StepMetrics a step by the training loop, which only sends a message.
//
// Each scalar's tag is "<group>/<the metrics file's key>", so a tag reads back as the
// metrics JSONL's field: train/loss, train/lr, train/grad_norm (a finite one),
// train/loss_scale (with loss scaling), train/skipped (1 on a step whose gradients
// overflowed), val/val_loss and val/val_perplexity (after a validation pass),
// perf/tokens_per_s, perf/step_ms, perf/mfu (when the model's FLOPs are known),
// perf/bubble, perf/sent_bytes, and
// memory/<kind>_bytes for the model state, parameters, gradients, optimizer state,
// communication buffers, activations and device memory.
// Thread safety: one thread (the training loop's).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/protocol/monitor.hpp"
#include "runtime/config/config.hpp"
#include "runtime/metrics.hpp"

namespace troupe {

class TrainingMonitor {
 public:
  /// The monitor of `config`, or null when it names no folder. A run resumed after step
  /// `kept_through` keeps what the folders hold of the steps up to it.
  static std::unique_ptr<TrainingMonitor> make(const MonitorConfig& config, int64_t kept_through = 0);
  /// Drains (bounded, as finish) and stops the monitor.
  ~TrainingMonitor();

  /// Hands one step's metrics to the monitor, stamped `taken` (when the step ended; a
  /// record held for a validation pass is sent later); never waits for the disk.
  void record(const StepMetrics& metrics,
              std::chrono::system_clock::time_point taken = std::chrono::system_clock::now());

  /// Waits at most `bound` for every record so far to be written, then says how many
  /// were dropped (if any) or that the disk did not keep up within the bound.
  void finish(std::chrono::milliseconds bound = std::chrono::seconds(30));

 private:
  struct Impl;
  explicit TrainingMonitor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The scalars of one step, as the monitor writes them (the tags above).
std::vector<MonitorScalar> monitor_scalars(const StepMetrics& metrics);

}  // namespace troupe
