#include "runtime/simulate_command.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/child_json.hpp"
#include "runtime/cli/job_arguments.hpp"
#include "sim/simulation.hpp"

namespace troupe {
namespace {

double median_of(const nlohmann::json& passes, const char* key) {
  std::vector<double> times;
  for (const nlohmann::json& pass : passes) times.push_back(pass[key].get<double>());
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// The processes' passes in the order each ran them: each forward, then its backward, over
// the mean of the processes' medians of its kind. Over that common median rather than each
// process's own, so that one process the host's scheduler slowed throughout (time-sliced
// processes seldom get equal shares: 404 and 443 ms a pass side by side here) leaves its
// ranks behind the others, as it leaves a real rank behind at every reduction.
std::vector<std::vector<double>> pass_noise(const std::vector<nlohmann::json>& processes) {
  double forward = 0, backward = 0;
  for (const nlohmann::json& passes : processes) {
    if (passes.empty()) return {};
    forward += median_of(passes, "forward_ms") / static_cast<double>(processes.size());
    backward += median_of(passes, "backward_ms") / static_cast<double>(processes.size());
  }
  if (forward <= 0 || backward <= 0) return {};
  std::vector<std::vector<double>> noise;
  for (const nlohmann::json& passes : processes) {
    noise.emplace_back();
    for (const nlohmann::json& pass : passes) {
      noise.back().push_back(pass["forward_ms"].get<double>() / forward);
      noise.back().push_back(pass["backward_ms"].get<double>() / backward);
    }
  }
  return noise;
}

Result<std::vector<sim::LayerCost>> measure(const JobConfig& job, const sim::ClusterSpec& cluster,
                                            const SimulateArguments& args,
                                            std::vector<std::vector<double>>* noise) {
  if (job.parallel.tp > 1)
    return make_error(
        fmt::format("{}: compute = \"measured\" times the whole layers of a tp = 1 job; with tp = {} "
                    "use compute = \"flops\"",
                    cluster.source, job.parallel.tp));
  const int64_t cores = cluster.device.cores > 0 ? cluster.device.cores
                                                 : std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads =
      job.train.threads > 0 ? job.train.threads : std::max<int64_t>(1, cores / cluster.ranks_per_host);
  // As many processes as the host has ranks, each with a rank's threads: where they ask for
  // more threads than it has cores they time-slice them as the ranks will, and what that costs
  // beyond the share (switches, caches refilled: 7-27% for 4 ranks on 2 cores here) is in the
  // times. Each is then brought back to one rank's full-speed cost, which the simulated host
  // shares out again (sim/processors.hpp).
  const int64_t copies = std::max<int64_t>(1, cluster.ranks_per_host);
  const double oversubscribed =
      std::max(1.0, static_cast<double>(copies * threads) / static_cast<double>(cores));
  std::string command =
      fmt::format("{} profile {} --json --median --repeats {} --warmup-seconds {} --set train.threads={}",
                  shell_quoted(args.program), shell_quoted(args.file), args.repeats, args.warmup_s, threads);
  for (const std::string& o : args.overrides) command += " --set " + shell_quoted(o);
  std::vector<sim::LayerCost> costs;
  std::vector<nlohmann::json> passes;
  for (const auto& printed :
       json_lines_of_all(std::vector<std::string>(static_cast<std::size_t>(copies), command))) {
    if (printed.empty() || !printed.front().contains("layers"))
      return make_error(fmt::format("timing the layers failed: {} printed no profile", command));
    const nlohmann::json& j = printed.front();
    costs.resize(j["layers"].size());
    // ms of one copy at full speed, averaged, in s
    const double each = 1e3 * static_cast<double>(copies) * oversubscribed;
    for (std::size_t i = 0; i < costs.size(); ++i) {
      const nlohmann::json& layer = j["layers"][i];
      costs[i].forward_s += layer["forward_ms"].get<double>() / each;
      costs[i].backward_s += layer["backward_ms"].get<double>() / each;
      costs[i].backward_input_s += layer.value("backward_input_ms", 0.0) / each;
      costs[i].backward_weight_s += layer.value("backward_weight_ms", 0.0) / each;
    }
    passes.push_back(j.value("passes", nlohmann::json::array()));
  }
  if (noise) *noise = pass_noise(passes);
  return costs;
}

}  // namespace

Result<std::vector<sim::LayerCost>> layer_costs(const JobConfig& job, const sim::ClusterSpec& cluster,
                                                const SimulateArguments& args,
                                                std::vector<std::vector<double>>* noise) {
  if (cluster.compute == "measured") return measure(job, cluster, args, noise);
  return sim::flops_layer_costs(job, cluster);
}

int run_simulate(const JobConfig& job, const SimulateArguments& args) {
  auto cluster = sim::load_cluster_file(args.cluster);
  if (!cluster) {
    std::fprintf(stderr, "troupe: %s\n", cluster.error().message.c_str());
    return kUsageExitCode;
  }
  auto layers = layer_costs(job, *cluster, args, &cluster->noise);
  if (!layers) {
    std::fprintf(stderr, "troupe: %s\n", layers.error().message.c_str());
    return kUsageExitCode;
  }
  auto result =
      sim::simulate_job(job, *cluster, *layers, sim::SimulationOptions{args.steps, !args.trace.empty()});
  if (!result) {
    std::fprintf(stderr, "troupe: %s\n", result.error().message.c_str());
    return kUsageExitCode;
  }
  if (!args.trace.empty()) {
    std::ofstream out(args.trace, std::ios::binary);
    out << sim::timeline_json(*result);
    if (!out) {
      std::fprintf(stderr, "troupe: cannot write the timeline to %s\n", args.trace.c_str());
      return 1;
    }
  }
  if (args.json)
    std::printf("%s\n", sim::result_json(*result, job.source, cluster->source).c_str());
  else
    std::printf("%s", sim::render_result(*result, job.source, cluster->source).c_str());
  if (!result->error.empty()) {
    if (args.json) std::fprintf(stderr, "troupe: the simulated job failed: %s\n", result->error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace troupe
