#include "runtime/simulate_command.hpp"

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "runtime/cli/job_arguments.hpp"
#include "runtime/data/corpus.hpp"
#include "runtime/flops_profile.hpp"
#include "runtime/model/gpt.hpp"
#include "sim/simulation.hpp"

namespace troupe {
namespace {

Result<std::vector<sim::LayerCost>> measure(const JobConfig& job, const sim::ClusterSpec& cluster,
                                            int repeats) {
  if (job.parallel.tp > 1)
    return make_error(
        fmt::format("{}: compute = \"measured\" times the whole layers of a tp = 1 job; with tp = {} "
                    "use compute = \"flops\"",
                    cluster.source, job.parallel.tp));
  const int64_t cores = cluster.device.cores > 0 ? cluster.device.cores
                                                 : std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads =
      job.train.threads > 0 ? job.train.threads : std::max<int64_t>(1, cores / cluster.ranks_per_host);
  torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(static_cast<uint64_t>(job.train.seed));
  auto corpus = TextCorpus::make(job.data, job.train.seed, job.model.seq_len);
  if (!corpus) return corpus.error();
  auto layers = make_gpt(job.model);
  TokenBatch b = sample_sequences(*corpus, job.model.seq_len, static_cast<uint64_t>(job.train.seed), 0,
                                  job.batch.micro_batch_size);
  LayerTimes times = time_layers(layers, MicroBatch{b.input, b.target}, lm_loss, repeats);
  std::vector<sim::LayerCost> costs;
  for (std::size_t i = 0; i < times.forward.size(); ++i)
    costs.push_back({times.forward[i], times.backward[i]});
  return costs;
}

}  // namespace

Result<std::vector<sim::LayerCost>> layer_costs(const JobConfig& job, const sim::ClusterSpec& cluster,
                                                int repeats) {
  if (cluster.compute == "measured") return measure(job, cluster, repeats);
  return sim::flops_layer_costs(job, cluster);
}

int run_simulate(const JobConfig& job, const SimulateArguments& args) {
  auto cluster = sim::load_cluster_file(args.cluster);
  if (!cluster) {
    std::fprintf(stderr, "troupe: %s\n", cluster.error().message.c_str());
    return kUsageExitCode;
  }
  auto layers = layer_costs(job, *cluster, args.repeats);
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
