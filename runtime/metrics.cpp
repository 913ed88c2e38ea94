#include "runtime/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace troupe {
namespace {

// A rate as a whole count for display; a rate that is not finite shows as 0.
int64_t round_rate(double rate) {
  return std::isfinite(rate) ? std::llround(rate) : 0;
}

}  // namespace

Result<MetricsWriter> MetricsWriter::make(const std::string& path, int64_t kept_through) {
  std::vector<std::string> kept;
  if (kept_through > 0) {
    std::ifstream before(path);
    for (std::string line; std::getline(before, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("step", int64_t{0}) <= kept_through)
        kept.push_back(line);
    }
  }
  std::ofstream file(path, std::ios::out | std::ios::trunc);
  for (const std::string& line : kept) file << line << "\n";
  if (!file) {
    return make_error(
        fmt::format("cannot open metrics file '{}' for writing: {}", path, std::strerror(errno)));
  }
  return MetricsWriter(path, std::move(file));
}

Status MetricsWriter::write(const StepMetrics& metrics) {
  const nlohmann::json line = {
      {"step", metrics.step},
      {"steps_total", metrics.steps_total},
      {"loss", metrics.loss},
      {"tokens_per_s", metrics.tokens_per_s},
      {"step_ms", metrics.step_ms},
      {"tokens", metrics.tokens},
      {"grad_norm", metrics.grad_norm},
      {"params", metrics.params},
      {"model_state_bytes", metrics.model_state_bytes},
      {"parameter_bytes", metrics.parameter_bytes},
      {"gradient_bytes", metrics.gradient_bytes},
      {"optimizer_state_bytes", metrics.optimizer_state_bytes},
      {"communication_bytes", metrics.communication_bytes},
      {"activation_bytes", metrics.activation_bytes},
      {"device_bytes", metrics.device_bytes},
      {"step_flops", metrics.step_flops},
      {"mfu", metrics.mfu},
      {"bubble", metrics.bubble},
      {"lr", metrics.lr},
      {"sent_bytes", metrics.sent_bytes},
      {"loss_scale", metrics.loss_scale},
      {"skipped", metrics.skipped},
  };
  nlohmann::json out = line;
  if (metrics.evaluated()) {
    out["val_loss"] = metrics.val_loss;
    out["val_perplexity"] = std::exp(metrics.val_loss);
  }
  file_ << out.dump() << '\n';
  file_.flush();
  if (!file_) return make_error(fmt::format("cannot write to metrics file '{}'", path_));
  return {};
}

std::string group_thousands(int64_t value) {
  // Unsigned negation so that INT64_MIN has a magnitude too.
  const uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return value < 0 ? "-" + grouped : grouped;
}

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(std::isfinite(seconds) && seconds > 0 ? std::llround(seconds) : 0);
  const int64_t hours = total / 3600;
  const int64_t minutes = (total / 60) % 60;
  const int64_t secs = total % 60;
  if (hours > 0) return fmt::format("{}:{:02}:{:02}", hours, minutes, secs);
  return fmt::format("{}:{:02}", minutes, secs);
}

std::string format_progress(const StepMetrics& metrics, double elapsed_s) {
  const int64_t remaining = metrics.steps_total - metrics.step;
  const double eta_s = metrics.step > 0 ? elapsed_s / static_cast<double>(metrics.step) * remaining : 0.0;
  std::string line =
      fmt::format("step {}/{}  loss {:.4f}  {} tok/s  ETA {}", metrics.step, metrics.steps_total,
                  metrics.loss, group_thousands(round_rate(metrics.tokens_per_s)), format_duration(eta_s));
  if (metrics.evaluated())
    line += fmt::format("  val {:.4f} (ppl {:.2f})", metrics.val_loss, std::exp(metrics.val_loss));
  if (metrics.skipped)
    line += fmt::format("  skipped: gradients overflowed at loss scale {:g}", metrics.loss_scale);
  return line;
}

std::string format_summary(const std::vector<StepMetrics>& steps, double wall_s,
                           const std::string& trace_path) {
  int64_t tokens = 0;
  double step_s = 0;
  for (const auto& step : steps) {
    tokens += step.tokens;
    step_s += step.step_ms / 1000.0;
  }
  const double tokens_per_s = step_s > 0 ? static_cast<double>(tokens) / step_s : 0.0;
  std::string line = fmt::format("trained {} steps", steps.size());
  if (!steps.empty()) line += fmt::format("  final loss {:.4f}", steps.back().loss);
  line += fmt::format("  {} tok/s", group_thousands(round_rate(tokens_per_s)));
  line += wall_s < 60 ? fmt::format("  wall {:.1f} s", wall_s)
                      : fmt::format("  wall {}", format_duration(wall_s));
  if (!trace_path.empty()) line += fmt::format("  trace {}", trace_path);
  return line;
}

}  // namespace troupe
