#include "tools/plan_command.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/config/choices.hpp"
#include "runtime/config/render.hpp"
#include "runtime/console.hpp"
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
          {"estimate_ms", p.estimate_ms},
          {"step_ms", p.step_ms},
          {"tokens_per_s", p.tokens_per_s},
          {"bubble", p.bubble},
          {"exposed_comm_ms", p.exposed_comm_ms},
          {"peak_bytes", p.peak_bytes}};
}

std::string progress_line(const sim::PlanProgress& p) {
  std::string line = fmt::format("plan: {} layouts, {} pruned, simulated {}/{}", p.considered, p.pruned,
                                 p.simulated, p.contenders);
  if (p.best_step_ms > 0) line += fmt::format("; best so far {} at {:.1f} ms/step", p.best, p.best_step_ms);
  return line + fmt::format("  ({:.0f} s)", p.elapsed_s);
}

// What covers the space: how many were pruned and why, and what the budget left.
std::string coverage(const sim::Plan& plan) {
  std::string text = fmt::format("{} layouts: {} refused, {} pruned by memory, {} by estimate, {} simulated",
                                 plan.considered, plan.refused.size(), plan.pruned_memory,
                                 plan.pruned_estimate, plan.simulated);
  if (plan.unsimulated_budget > 0)
    text += fmt::format(", {} left unsimulated by the time budget", plan.unsimulated_budget);
  return text;
}

// No layout fits: the least any needs, what a rank has, and the keys that would change it
// (the layouts tried already go down to micro-batches of 1 and, on GPUs, offload the optimizer).
std::string no_fit(const JobConfig& job, const sim::ClusterSpec& cluster, const sim::Plan& plan) {
  std::string first = plan.refused.empty() ? plan.pruned.front().refused : plan.refused.front().refused;
  if (plan.unsimulated_budget > 0 && plan.smallest_need <= plan.memory_budget)
    return fmt::format(
        "{}: no simulated layout fit {} before the time budget ran out ({} layouts left unsimulated); raise "
        "--budget-seconds",
        job.source, cluster.source, plan.unsimulated_budget);
  if (plan.smallest_need <= plan.memory_budget)
    return fmt::format("{}: no layout could run on {}; the first refused: {}", job.source, cluster.source,
                       first);
  std::vector<std::string> keys{"more ranks (more hosts or ranks_per_host in the cluster file)"};
  if (!job.model.activation_checkpointing) keys.push_back("[model] activation_checkpointing = true");
  keys.push_back(fmt::format("a shorter [model] seq_len (now {})", job.model.seq_len));
  if (cluster.device.kind != "gpu") keys.push_back("a device with more memory in the cluster file");
  return fmt::format(
      "{}: no layout fits {}: the smallest any needs is {:.2f} GB per rank (micro-batches down to 1{}), and "
      "a "
      "rank has {:.2f} GB; {} would change that",
      job.source, cluster.source, plan.smallest_need / 1e9,
      cluster.device.kind == "gpu" ? ", the optimizer on the host" : "", plan.memory_budget / 1e9,
      fmt::format("{}", fmt::join(keys, ", or ")));
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
  sim::PlanOptions options = args.plan;
  const bool live = !args.simulate.json && progress_style() == ProgressStyle::terminal;
  if (live)
    options.progress = [](const sim::PlanProgress& p) {
      show_progress(ProgressStyle::terminal, progress_line(p));
    };
  auto plan = sim::plan_job(job, *cluster, layers, options);
  if (live) end_progress(ProgressStyle::terminal);
  if (!plan) {
    std::fprintf(stderr, "troupe: %s\n", plan.error().message.c_str());
    return kUsageExitCode;
  }
  if (plan->ranked.empty()) {
    std::fprintf(stderr, "troupe: %s\n", no_fit(job, *cluster, *plan).c_str());
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
    j["considered"] = plan->considered;
    j["pruned_memory"] = plan->pruned_memory;
    j["pruned_estimate"] = plan->pruned_estimate;
    j["unsimulated_budget"] = plan->unsimulated_budget;
    j["simulated"] = plan->simulated;
    for (const auto& p : plan->ranked) j["ranked"].push_back(candidate_json(p));
    for (const auto& p : plan->refused)
      j["refused"].push_back({{"layout", p.candidate.describe()}, {"why", p.refused}});
    for (const auto& p : plan->pruned)
      j["pruned"].push_back(
          {{"layout", p.candidate.describe()}, {"estimate_ms", p.estimate_ms}, {"why", p.refused}});
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s on %s: %s; the best %zu:\n", job.source.c_str(), cluster->source.c_str(),
              coverage(*plan).c_str(), shown);
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
