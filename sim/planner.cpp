#include "sim/planner.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "pipeline/schedule.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/config/load.hpp"
#include "runtime/config/render.hpp"
#include "sim/simulation.hpp"

namespace troupe::sim {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool tensor_parallel_fits(const ModelConfig& m, int64_t tp) {
  const int64_t ff = m.d_ff > 0 ? m.d_ff : 4 * m.d_model;
  const int64_t kv_heads = m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads;
  return m.n_heads % tp == 0 && kv_heads % tp == 0 && ff % tp == 0 && m.vocab_size % tp == 0;
}

// The schedules worth trying for pp stages over `micro` micro-batches.
std::vector<std::string> schedules_for(int64_t pp, int64_t micro) {
  if (pp == 1) return {"1f1b"};
  std::vector<std::string> out;
  for (const char* s : {"1f1b", "zb_h1", "interleaved_1f1b"})
    if (pipeline::check_shape(s, {pp, micro, pipeline::default_virtual_stages(s)})) out.push_back(s);
  return out;
}

// Simulated step times this close are a tie: the model's error on a real machine is larger.
constexpr double kTie = 0.01;

// What a layout asks of the runtime beyond plain data parallelism, to break ties: fewer
// pipeline stages, tensor-parallel ranks, ZeRO partitioning and offload first.
std::tuple<int64_t, int64_t, int64_t, bool, int64_t> complexity(const Candidate& c) {
  return {c.pp, c.tp, c.zero, c.offload != OffloadTier::none, c.accumulation};
}

int64_t memory_budget(const ClusterSpec& cluster) {
  const DeviceSpec& d = cluster.device;
  return d.kind == "cpu" ? d.memory_bytes / cluster.ranks_per_host : d.memory_bytes;
}

}  // namespace

std::string Candidate::describe() const {
  return fmt::format("dp {} × pp {} × tp {}, ZeRO-{}{}, micro {} × {}{}", dp, pp, tp, zero,
                     offload == OffloadTier::none ? "" : ", optimizer on " + name_of(offload), micro,
                     accumulation, pp > 1 ? ", " + schedule : "");
}

std::vector<Candidate> plan_candidates(const JobConfig& base, const ClusterSpec& cluster) {
  const int64_t world = cluster.world(), global = base.batch.global_batch_size;
  const int64_t layers = base.model.n_layers + 2;
  std::vector<Candidate> out;
  for (int64_t tp : divisors(cluster.ranks_per_host)) {
    if (!tensor_parallel_fits(base.model, tp) || world % tp != 0) continue;
    if (tp > 1 && cluster.compute == "measured") continue;  // measured layers are whole layers
    for (int64_t pp : divisors(world / tp)) {
      if (pp > layers) continue;
      const int64_t dp = world / (tp * pp);
      if (global % dp != 0) continue;
      for (int64_t micro : divisors(global / dp)) {
        const int64_t accumulation = global / (dp * micro);
        for (const std::string& schedule : schedules_for(pp, accumulation))
          for (int64_t zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
            const ZeroPolicy policy = ZeroPolicy::of(zero);
            // Split backwards are not run where a layer's weights are gathered around its backward.
            if (policy.gathers_before_use() && schedule == "zb_h1") continue;
            std::vector<OffloadTier> tiers{OffloadTier::none};
            if (cluster.device.kind == "gpu" && policy.partitions_optimizer_state())
              tiers.push_back(OffloadTier::cpu);
            for (OffloadTier tier : tiers)
              out.push_back(Candidate{dp, pp, tp, zero, tier, schedule, micro, accumulation});
          }
      }
    }
  }
  return out;
}

Result<JobConfig> apply_candidate(const JobConfig& base, const Candidate& c) {
  JobConfig job = base;
  job.cluster.world_size = c.dp * c.pp * c.tp;
  job.parallel.dp = c.dp;
  job.parallel.pp = c.pp;
  job.parallel.tp = c.tp;
  job.parallel.sequence_parallel = c.tp > 1 && base.parallel.sequence_parallel;
  job.zero.stage = c.zero;
  job.offload.optimizer = c.offload;
  job.pipeline.schedule = c.schedule;
  job.pipeline.virtual_stages = 0;
  // Layer counts were made for the job's own layout: a candidate's cut is uniform instead.
  if (!job.pipeline.partition.counts.empty()) job.pipeline.partition.method = PartitionMethod::uniform;
  job.pipeline.partition.counts.clear();
  job.batch.micro_batch_size = c.micro;
  job.batch.gradient_accumulation_steps = c.accumulation;
  return load_config_string(render_config(job), base.source, {});
}

Result<Plan> plan_job(const JobConfig& base, const ClusterSpec& cluster, const LayerCostSource& layers) {
  Plan plan;
  plan.memory_budget = memory_budget(cluster);
  std::map<std::pair<int64_t, int64_t>, std::vector<LayerCost>> costs;  // by (micro, tp)
  for (const Candidate& c : plan_candidates(base, cluster)) {
    PlannedJob p{c, base, 0, 0, 0, 0, 0, ""};
    auto job = apply_candidate(base, c);
    if (!job) {
      p.refused = job.error().message;
      plan.refused.push_back(std::move(p));
      continue;
    }
    p.job = *job;
    auto key = std::make_pair(c.micro, c.tp);
    if (!costs.count(key)) {
      auto measured = layers(*job);
      if (!measured) return measured.error();
      costs[key] = std::move(*measured);
    }
    auto result = simulate_job(*job, cluster, costs[key], SimulationOptions{1, false});
    if (!result || !result->error.empty()) {
      p.refused = result ? result->error : result.error().message;
      plan.refused.push_back(std::move(p));
      continue;
    }
    p.step_ms = result->step_ms_median();
    p.tokens_per_s = static_cast<double>(result->tokens) / (p.step_ms / 1e3);
    p.bubble = result->bubble;
    p.exposed_comm_ms = result->exposed_comm_ms;
    p.peak_bytes = result->peak_bytes;
    if (p.peak_bytes > plan.memory_budget) {
      p.refused = fmt::format("a rank would hold {:.2f} GB, more than its {:.2f} GB", p.peak_bytes / 1e9,
                              plan.memory_budget / 1e9);
      plan.refused.push_back(std::move(p));
      continue;
    }
    plan.ranked.push_back(std::move(p));
  }
  if (plan.ranked.empty() && plan.refused.empty())
    return make_error(fmt::format("{}: no layout divides {} ranks and the global batch of {}", base.source,
                                  cluster.world(), base.batch.global_batch_size));
  if (plan.ranked.empty()) return plan;  // every layout refused, each saying why
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(),
                   [](const PlannedJob& a, const PlannedJob& b) { return a.step_ms < b.step_ms; });
  // Layouts the simulation cannot tell apart: the simplest of them first.
  const double close = plan.ranked.front().step_ms * (1 + kTie);
  auto simplest =
      std::min_element(plan.ranked.begin(), plan.ranked.end(), [&](const PlannedJob& a, const PlannedJob& b) {
        const bool a_close = a.step_ms <= close, b_close = b.step_ms <= close;
        if (a_close != b_close) return a_close;
        return a_close && complexity(a.candidate) < complexity(b.candidate);
      });
  std::rotate(plan.ranked.begin(), simplest, simplest + 1);
  return plan;
}

std::string why_first(const Plan& plan, std::size_t index) {
  const PlannedJob& p = plan.ranked[index];
  std::string why =
      fmt::format("bubble {:.1f}%, exposed communication {:.1f} ms, peak {:.2f} GB of {:.2f} GB",
                  100 * p.bubble, p.exposed_comm_ms, p.peak_bytes / 1e9, plan.memory_budget / 1e9);
  if (index + 1 >= plan.ranked.size()) return why;
  const PlannedJob& next = plan.ranked[index + 1];
  if (next.step_ms < p.step_ms)  // the chosen one, simpler than a layout within the tie
    return why + fmt::format("; within {:.1f}% of the fastest ({}) and simpler",
                             100 * (p.step_ms / next.step_ms - 1), next.candidate.describe());
  return why + fmt::format("; {:.1f}% faster than the next ({})", 100 * (next.step_ms / p.step_ms - 1),
                           next.candidate.describe());
}

}  // namespace troupe::sim
