#include "sim/measured_compute.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/median.hpp"

namespace troupe::sim {
namespace {

const nlohmann::json& passes_of(const nlohmann::json& profile) {
  static const nlohmann::json none = nlohmann::json::array();
  return profile.contains("passes") ? profile["passes"] : none;
}

double median_of(const nlohmann::json& passes, const char* key) {
  std::vector<double> times;
  for (const nlohmann::json& pass : passes) times.push_back(pass[key].get<double>());
  return upper_median(std::move(times));
}

}  // namespace

double oversubscription(int64_t processes, int64_t threads_each, int64_t cores) {
  return std::max(
      1.0, static_cast<double>(processes * threads_each) / static_cast<double>(std::max<int64_t>(1, cores)));
}

Result<std::vector<LayerCost>> full_speed_layer_costs(const std::vector<nlohmann::json>& profiles,
                                                      double oversubscribed) {
  if (profiles.empty()) return make_error("timing the layers failed: no process printed a profile");
  std::vector<LayerCost> costs(profiles.front()["layers"].size());
  // ms of one process at full speed, averaged over the processes, in s
  const double each = 1e3 * static_cast<double>(profiles.size()) * std::max(1.0, oversubscribed);
  for (const nlohmann::json& profile : profiles) {
    const nlohmann::json& layers = profile["layers"];
    if (layers.size() != costs.size())
      return make_error(fmt::format("timing the layers failed: one process timed {} layers, another {}",
                                    costs.size(), layers.size()));
    for (std::size_t i = 0; i < costs.size(); ++i) {
      costs[i].forward_s += layers[i]["forward_ms"].get<double>() / each;
      costs[i].backward_s += layers[i]["backward_ms"].get<double>() / each;
      costs[i].backward_input_s += layers[i].value("backward_input_ms", 0.0) / each;
      costs[i].backward_weight_s += layers[i].value("backward_weight_ms", 0.0) / each;
    }
  }
  return costs;
}

std::vector<std::vector<double>> pass_noise(const std::vector<nlohmann::json>& profiles) {
  double forward = 0, backward = 0;
  for (const nlohmann::json& profile : profiles) {
    const nlohmann::json& passes = passes_of(profile);
    if (passes.empty()) return {};
    forward += median_of(passes, "forward_ms") / static_cast<double>(profiles.size());
    backward += median_of(passes, "backward_ms") / static_cast<double>(profiles.size());
  }
  if (forward <= 0 || backward <= 0) return {};
  std::vector<std::vector<double>> noise;
  for (const nlohmann::json& profile : profiles) {
    noise.emplace_back();
    for (const nlohmann::json& pass : passes_of(profile)) {
      noise.back().push_back(pass["forward_ms"].get<double>() / forward);
      noise.back().push_back(pass["backward_ms"].get<double>() / backward);
    }
  }
  return noise;
}

}  // namespace troupe::sim
