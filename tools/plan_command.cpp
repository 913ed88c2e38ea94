#include "tools/plan_command.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/config/choices.hpp"
#include "runtime/config/render.hpp"
#include "sim/planner.hpp"
#include "tools/cli/job_arguments.hpp"

namespace troupe {
namespace {

std::string default_out(const std::string& file) {
  std::filesystem::path p(file);
  return p.replace_extension(".plan.toml").filename().string();
}

nlohmann::ordered_json candidate_json(const sim::PlannedJob& p) {
  const sim::Candidate& c = p.candidate;
  return {{"dp", c.dp},
          {"pp", c.pp},
          {"tp", c.tp},
          {"zero", c.zero},
          {"offload", name_of(c.offload)},
          {"schedule", c.schedule},
          {"micro_batch_size", c.micro},
          {"gradient_accumulation_steps", c.accumulation},
          {"step_ms", p.step_ms},
          {"tokens_per_s", p.tokens_per_s},
          {"bubble", p.bubble},
          {"exposed_comm_ms", p.exposed_comm_ms},
          {"peak_bytes", p.peak_bytes}};
}

}  // namespace

int run_plan(const JobConfig& job, const PlanArguments& args) {
  auto cluster = sim::load_cluster_file(args.simulate.cluster);
  if (!cluster) {
    std::fprintf(stderr, "troupe: %s\n", cluster.error().message.c_str());
    return kUsageExitCode;
  }
  // Layers timed once per micro-batch size: the candidate's job file and overrides.
  sim::LayerCostSource layers = [&](const JobConfig& candidate) {
    SimulateArguments a = args.simulate;
    a.overrides.push_back(fmt::format("batch.micro_batch_size={}", candidate.batch.micro_batch_size));
    a.overrides.push_back(
        fmt::format("batch.gradient_accumulation_steps={}", candidate.batch.gradient_accumulation_steps));
    a.overrides.push_back(fmt::format("parallel.dp={}", candidate.parallel.dp));
    a.overrides.push_back(fmt::format("parallel.pp={}", candidate.parallel.pp));
    a.overrides.push_back(fmt::format("parallel.tp={}", candidate.parallel.tp));
    a.overrides.push_back(fmt::format("cluster.world_size={}", candidate.cluster.world_size));
    a.overrides.push_back(fmt::format("batch.global_batch_size={}", candidate.batch.global_batch_size));
    return layer_costs(candidate, *cluster, a);
  };
  auto plan = sim::plan_job(job, *cluster, layers);
  if (!plan) {
    std::fprintf(stderr, "troupe: %s\n", plan.error().message.c_str());
    return kUsageExitCode;
  }
  if (plan->ranked.empty()) {
    std::fprintf(stderr, "troupe: %s: no layout fits %s; the first refused: %s\n", job.source.c_str(),
                 cluster->source.c_str(), plan->refused.front().refused.c_str());
    return 1;
  }
  const std::string out = args.out.empty() ? default_out(job.source) : args.out;
  std::ofstream file(out);
  file << "# troupe plan " << job.source << " --cluster " << cluster->source << ": "
       << plan->ranked.front().candidate.describe() << "\n"
       << render_config(plan->ranked.front().job);
  if (!file) {
    std::fprintf(stderr, "troupe: cannot write the planned job to %s\n", out.c_str());
    return 1;
  }
  const std::size_t shown = std::min<std::size_t>(static_cast<std::size_t>(args.top), plan->ranked.size());
  if (args.simulate.json) {
    nlohmann::ordered_json j{{"file", job.source},
                             {"cluster", cluster->source},
                             {"out", out},
                             {"memory_budget_bytes", plan->memory_budget}};
    j["considered"] = plan->ranked.size() + plan->refused.size();
    for (const auto& p : plan->ranked) j["ranked"].push_back(candidate_json(p));
    for (const auto& p : plan->refused)
      j["refused"].push_back({{"layout", p.candidate.describe()}, {"why", p.refused}});
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s on %s: %zu layouts ranked, %zu refused; the best %zu:\n", job.source.c_str(),
              cluster->source.c_str(), plan->ranked.size(), plan->refused.size(), shown);
  for (std::size_t i = 0; i < shown; ++i) {
    const sim::PlannedJob& p = plan->ranked[i];
    std::printf("  %zu. %-52s %9.1f ms/step %10.0f tokens/s\n     %s\n", i + 1,
                p.candidate.describe().c_str(), p.step_ms, p.tokens_per_s, sim::why_first(*plan, i).c_str());
  }
  std::map<std::string, int> reasons;
  for (const auto& p : plan->refused) ++reasons[p.refused.substr(0, p.refused.find(';'))];
  for (const auto& [reason, count] : reasons) std::printf("  refused %d: %s\n", count, reason.c_str());
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace troupe
