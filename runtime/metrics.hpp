// Per-step training metrics: the record, the JSON-lines file, and the console lines.
//
// Every trainer (the reference and the distributed runtime) reports a StepMetrics per
// optimizer step. A MetricsWriter appends one JSON object per step to a file that tools
// can tail; format_progress and format_summary make the human-readable lines.
// Thread safety: a MetricsWriter is owned by one thread (the one that finishes steps);
// the format functions are pure.
#pragma once

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"

namespace troupe {

/// What one optimizer step did. `step` counts from 1: the step just finished.
struct StepMetrics {
  int64_t step = 0;
  int64_t steps_total = 0;
  double loss = 0;          ///< mean loss over the global batch
  double tokens_per_s = 0;  ///< tokens / step time
  double step_ms = 0;       ///< wall time of this step
  int64_t tokens = 0;       ///< tokens in the global batch
  double grad_norm = 0;     ///< global L2 norm of the gradients, before clipping
  int64_t params = 0;       ///< the model's parameter count
  /// max over ranks of parameter + gradient + optimizer-state bytes held (peak of the step)
  int64_t model_state_bytes = 0;
  int64_t parameter_bytes = 0;  ///< this rank's peaks of the step, by kind
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t communication_bytes = 0;
  int64_t activation_bytes = 0;  ///< this rank's peak of activations held (MemoryKind::activations)
  /// Of this rank's model state and communication buffers, the bytes in the device's memory
  /// (GPU ranks, and the device path on CPU streams; 0 on the host path).
  int64_t device_bytes = 0;
  double bubble = 0;             ///< the ranks' mean idle fraction of the step (StepStats::bubble)
  double lr = 0;                 ///< the learning rate of the step's update ([scheduler])
  /// Payload bytes rank 0 sent to its peers during the step (gradients, gathers, activations).
  int64_t sent_bytes = 0;
  double loss_scale = 0;  ///< the loss scale the step ran with (0: no loss scaling)
  bool skipped = false;   ///< the gradients overflowed: no update on any rank (grad_norm null)
  /// The model's matrix-product FLOPs of the step (forward and backward, global batch).
  double step_flops = 0;
  /// step_flops / (step time × ranks × rank 0's measured GEMM rate in the job's dtype).
  double mfu = 0;
  /// After a validation pass ([train] eval_interval): its mean loss; NaN on other steps.
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  bool evaluated() const { return val_loss == val_loss; }
};

/// Appends one JSON object per step to a file, flushed after each line, with every
/// StepMetrics field under its own name:
/// {"step":..,"steps_total":..,"loss":..,"tokens_per_s":..,"step_ms":..,"tokens":..,
///  "grad_norm":..,"params":..,"model_state_bytes":..,"parameter_bytes":..,
///  "gradient_bytes":..,"optimizer_state_bytes":..,"communication_bytes":..,"activation_bytes":..,"device_bytes":..,"bubble":..,
///  "lr":..,"sent_bytes":..,"loss_scale":..,"skipped":..,"step_flops":..,"mfu":..}; a grad_norm that is not
///  finite (a skipped step's) is null. A step followed by validation adds "val_loss" and
///  "val_perplexity" (e^val_loss).
class MetricsWriter {
 public:
  /// Creates (truncates) `path`; fails with a sentence naming the path. A run resumed after
  /// step `kept_through` > 0 keeps the file's lines of steps up to it (those before a restart).
  static Result<MetricsWriter> make(const std::string& path, int64_t kept_through = 0);

  /// Appends `metrics` as one line; fails if the write does not reach the file.
  Status write(const StepMetrics& metrics);

  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::string path, std::ofstream file) : path_(std::move(path)), file_(std::move(file)) {}

  std::string path_;
  std::ofstream file_;
};

/// One progress line, e.g. "step 12/20  loss 3.2141  1,234 tok/s  ETA 0:07"; the ETA
/// extrapolates `elapsed_s` (time since training began) over the remaining steps.
std::string format_progress(const StepMetrics& metrics, double elapsed_s);

/// The end-of-run line, e.g. "trained 20 steps  final loss 2.1034  1,234 tok/s  wall 12.3 s
/// trace out/trace.json": tok/s is total tokens over total step time; the trace part only
/// when `trace_path` is non-empty.
std::string format_summary(const std::vector<StepMetrics>& steps, double wall_s,
                           const std::string& trace_path = "");

/// `value` with thousands separators: 1234567 -> "1,234,567".
std::string group_thousands(int64_t value);

/// A duration as "m:ss", or "h:mm:ss" from an hour up; negative counts as zero.
std::string format_duration(double seconds);

}  // namespace troupe
