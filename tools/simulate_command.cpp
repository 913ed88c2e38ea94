#include "tools/simulate_command.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/measured_compute.hpp"
#include "sim/simulation.hpp"
#include "tools/cli/job_arguments.hpp"
#include "tools/profile/child_json.hpp"

namespace troupe {
namespace {

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
  std::string command =
      fmt::format("{} profile {} --json --median --repeats {} --warmup-seconds {} --set train.threads={}",
                  shell_quoted(args.program), shell_quoted(args.file), args.repeats, args.warmup_s, threads);
  for (const std::string& o : args.overrides) command += " --set " + shell_quoted(o);
  std::vector<nlohmann::json> profiles;
  for (const auto& printed :
       json_lines_of_all(std::vector<std::string>(static_cast<std::size_t>(copies), command))) {
    if (printed.empty() || !printed.front().contains("layers"))
      return make_error(fmt::format("timing the layers failed: {} printed no profile", command));
    profiles.push_back(printed.front());
  }
  if (noise) *noise = sim::pass_noise(profiles);
  return sim::full_speed_layer_costs(profiles, sim::oversubscription(copies, threads, cores));
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
