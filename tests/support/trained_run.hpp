// What `troupe run --metrics M --parameters-out P` leaves: the per-step losses and gradient
// norms, and the final parameters, read back for comparisons between runs.
#pragma once

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::testing {

struct TrainedRun {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<double> lrs;  ///< the learning rate of each step's update
  std::vector<double> loss_scales;  ///< with loss scaling: the scale of each step
  std::vector<int> skipped;         ///< the steps (from 1) skipped for overflow
  std::vector<float> parameters;
};

inline TrainedRun read_run(const std::string& metrics, const std::string& parameters) {
  TrainedRun run;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto json = nlohmann::json::parse(line);
    run.losses.push_back(json.at("loss"));
    // A skipped step's norm is not finite: null in the file.
    run.grad_norms.push_back(json.at("grad_norm").is_null() ? NAN : json.at("grad_norm").get<double>());
    if (json.contains("loss_scale")) run.loss_scales.push_back(json.at("loss_scale"));
    if (json.value("skipped", false)) run.skipped.push_back(json.at("step").get<int>());
    if (json.contains("lr")) run.lrs.push_back(json.at("lr"));
  }
  std::ifstream p(parameters, std::ios::binary);
  p.seekg(0, std::ios::end);
  auto bytes = p.tellg();
  if (bytes <= 0) return run;
  run.parameters.resize(static_cast<std::size_t>(bytes) / sizeof(float));
  p.seekg(0);
  p.read(reinterpret_cast<char*>(run.parameters.data()),
         static_cast<std::streamsize>(run.parameters.size() * 4));
  return run;
}

/// The VALUEs of the "NAME STEP VALUE" lines a test rank prints, whatever prefixes them
/// (the launcher's "[rank 0] "), in order.
inline std::vector<double> printed_figures(const std::string& output, const std::string& name) {
  std::vector<double> figures;
  std::istringstream in(output);
  const std::string label = name + " ";
  for (std::string line; std::getline(in, line);) {
    auto at = line.find(label);
    if (at == std::string::npos) continue;
    std::istringstream fields(line.substr(at + label.size()));
    long long step = 0;
    double value = 0;
    if (fields >> step >> value) figures.push_back(value);
  }
  return figures;
}

/// The losses a test rank prints ("loss STEP VALUE").
inline std::vector<double> printed_losses(const std::string& output) {
  return printed_figures(output, "loss");
}

/// Raw bytes of float32 values (a parameters file read whole) as floats.
inline std::vector<float> floats_of(const std::string& raw) {
  std::vector<float> values(raw.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), raw.data(), values.size() * sizeof(float));
  return values;
}

/// ‖a − b‖ / ‖b‖ over the parameters (element by element the relative error is ill-posed
/// for weights near zero); infinity when the sizes differ or b is empty.
inline double parameter_distance(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace troupe::testing
