#include "sim/planner.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "pipeline/schedule.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/config/load.hpp"
#include "runtime/config/render.hpp"
#include "sim/simulation.hpp"
#include "sim/step_estimate.hpp"

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

namespace {

using Clock = std::chrono::steady_clock;
using CostKey = std::pair<int64_t, int64_t>;  // (micro-batch, tp): what layer times depend on

// By pipeline stage, the optimizer state a GPU rank keeps in host memory ([offload]
// optimizer): not the device's to hold. Zeros on CPU clusters, where every byte is the host's.
std::vector<int64_t> offloaded_bytes(const JobConfig& job, const ClusterSpec& cluster,
                                     const JobCosts& costs) {
  std::vector<int64_t> out(costs.stages.size(), 0);
  if (cluster.device.kind != "gpu" || job.offload.optimizer == OffloadTier::none) return out;
  for (std::size_t s = 0; s < out.size(); ++s)
    out[s] = costs.stages[s].model_state[MemoryKind::optimizer_state];
  return out;
}

// The least a rank of `costs` holds in its memory at its peak, which the simulation's peak
// cannot be under: its stage's model state and buffers, less what is offloaded, and one
// micro-batch's activations of its costliest chunk (kept from its forward to its backward).
int64_t least_need(const JobConfig& job, const ClusterSpec& cluster, const JobCosts& costs) {
  const std::vector<int64_t> offloaded = offloaded_bytes(job, cluster, costs);
  int64_t need = 0;
  for (std::size_t s = 0; s < costs.stages.size(); ++s) {
    const MemoryBytes& held = costs.stages[s].model_state;
    need = std::max(need, held.model_state() + held[MemoryKind::communication] - offloaded[s]);
  }
  int64_t activations = 0;
  for (const ChunkCost& c : costs.chunks) activations = std::max(activations, c.held_bytes + c.saved_bytes);
  return need + activations;
}

// Every candidate made a job, costed and estimated; refused or pruned by memory as it goes.
Status estimate_candidates(const JobConfig& base, const ClusterSpec& cluster, const LayerCostSource& layers,
                           std::map<CostKey, std::vector<LayerCost>>& costs, Plan& plan,
                           std::vector<PlannedJob>& estimated) {
  for (const Candidate& c : plan_candidates(base, cluster)) {
    ++plan.considered;
    PlannedJob p{c, base, 0, 0, 0, 0, 0, 0, {}, ""};
    auto job = apply_candidate(base, c);
    if (!job) {
      p.refused = job.error().message;
      plan.refused.push_back(std::move(p));
      continue;
    }
    p.job = *job;
    const CostKey key{c.micro, c.tp};
    if (!costs.count(key)) {
      auto measured = layers(*job);
      if (!measured) return measured.error();
      costs[key] = std::move(*measured);
    }
    auto job_cost = job_costs(*job, cluster, costs[key]);
    auto estimate =
        job_cost ? estimate_step(*job, cluster, *job_cost) : Result<StepEstimate>(job_cost.error());
    if (!estimate) {
      p.refused = estimate.error().message;
      plan.refused.push_back(std::move(p));
      continue;
    }
    p.estimate_ms = estimate->step_ms;
    p.offloaded_bytes = offloaded_bytes(*job, cluster, *job_cost);
    const int64_t need = least_need(*job, cluster, *job_cost);
    if (plan.smallest_need == 0 || need < plan.smallest_need) plan.smallest_need = need;
    if (need > plan.memory_budget) {
      p.refused = fmt::format(
          "pruned: a rank needs {:.2f} GB at least (model state, buffers, one micro-batch's activations), "
          "more "
          "than its {:.2f} GB",
          need / 1e9, plan.memory_budget / 1e9);
      ++plan.pruned_memory;
      plan.pruned.push_back(std::move(p));
      continue;
    }
    estimated.push_back(std::move(p));
  }
  return {};
}

// How many of `estimated` (best estimate first) to simulate first: all when exhaustive,
// else those within the margin of the best, at most simulate_top.
std::size_t first_contenders(const std::vector<PlannedJob>& estimated, const PlanOptions& o) {
  if (o.exhaustive || estimated.empty()) return estimated.size();
  const double within = estimated.front().estimate_ms * (1 + o.margin);
  std::size_t n = 0;
  while (n < estimated.size() && static_cast<int64_t>(n) < o.simulate_top &&
         estimated[n].estimate_ms <= within)
    ++n;
  return n;
}

// Those never simulated, with why: `simulated` better estimates were; or, when the budget
// ran out before any simulated layout fit, the budget.
void leave_unsimulated(std::vector<PlannedJob>::iterator from, std::vector<PlannedJob>::iterator to,
                       double best, std::size_t simulated, bool out_of_time, const PlanOptions& o,
                       Plan& plan) {
  for (auto p = from; p != to; ++p) {
    if (out_of_time) {
      p->refused = "not simulated: the time budget ran out before a simulated layout fit";
      ++plan.unsimulated_budget;
    } else {
      p->refused =
          p->estimate_ms <= best * (1 + o.margin)
              ? fmt::format("pruned: estimated {:.1f} ms/step, past the {} best estimates (simulated)",
                            p->estimate_ms, simulated)
              : fmt::format(
                    "pruned: estimated {:.1f} ms/step, more than {:.0f}% behind the best "
                    "estimate ({:.1f} ms)",
                    p->estimate_ms, 100 * o.margin, best);
      ++plan.pruned_estimate;
    }
    plan.pruned.push_back(std::move(*p));
  }
}

// One contender's simulation, once run; skipped by the time budget when never started.
struct Outcome {
  std::optional<Result<SimulationResult>> result;
  bool skipped = false;
};

// The largest of a simulated job's stage peaks in its ranks' memory: each less what its
// stage offloads to the host (offloaded_bytes).
int64_t peak_in_memory(const SimulationResult& r, const std::vector<int64_t>& offloaded) {
  int64_t peak = 0;
  for (const StageFigures& stage : r.stages)
    peak = std::max(peak, stage.peak_bytes - offloaded[static_cast<std::size_t>(stage.stage)]);
  return peak;
}

// What the simulating threads share, under `mutex`.
struct SimulationQueue {
  std::mutex mutex;
  std::condition_variable finished;
  std::size_t next = 0;  // the next contender to take
  std::size_t done = 0;  // simulated or skipped
  std::size_t ran = 0;   // simulated
  double ran_s = 0;      // their wall time, summed: the expected cost of the next
  Clock::time_point began = Clock::now();
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - began).count(); }
};

// The next contender to simulate, or none left. Under a budget, one that would not end in
// it by the simulations timed so far is skipped; the first (the best estimate) always
// runs, and the others wait until it has been timed.
std::optional<std::size_t> take(SimulationQueue& q, std::vector<Outcome>& outcomes, const PlanOptions& o) {
  std::unique_lock<std::mutex> lock(q.mutex);
  for (;;) {
    if (q.next >= outcomes.size()) return std::nullopt;
    const std::size_t i = q.next;
    if (i == 0 || o.budget_s <= 0) return q.next++;
    q.finished.wait(lock, [&] { return q.ran > 0; });  // the first simulation ends: bounded work
    if (i != q.next) continue;                         // another thread took it meanwhile
    ++q.next;
    if (q.elapsed() + q.ran_s / static_cast<double>(q.ran) <= o.budget_s) return i;
    outcomes[i].skipped = true;
    ++q.done;
    q.finished.notify_all();
  }
}

void simulate_from(SimulationQueue& q, std::vector<Outcome>& outcomes,
                   const std::vector<PlannedJob>& contenders, const ClusterSpec& cluster,
                   const std::map<CostKey, std::vector<LayerCost>>& costs, const PlanOptions& o) {
  while (auto i = take(q, outcomes, o)) {
    const PlannedJob& p = contenders[*i];
    const auto started = Clock::now();
    auto result = simulate_job(p.job, cluster, costs.at({p.candidate.micro, p.candidate.tp}),
                               SimulationOptions{1, false});
    std::lock_guard<std::mutex> lock(q.mutex);
    q.ran_s += std::chrono::duration<double>(Clock::now() - started).count();
    ++q.ran;
    ++q.done;
    outcomes[*i].result = std::move(result);
    q.finished.notify_all();
  }
}

// The progress line's figures from the outcomes so far (called under the queue's mutex).
void fold_progress(const std::vector<Outcome>& outcomes, const std::vector<PlannedJob>& contenders,
                   int64_t memory_budget, int64_t simulated_before, PlanProgress& progress) {
  progress.simulated = simulated_before;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const auto& r = outcomes[i].result;
    if (!r) continue;
    ++progress.simulated;
    if (!*r || !(*r)->error.empty() || peak_in_memory(**r, contenders[i].offloaded_bytes) > memory_budget)
      continue;
    const double ms = (*r)->step_ms_median();
    if (progress.best_step_ms == 0 || ms < progress.best_step_ms) {
      progress.best_step_ms = ms;
      progress.best = contenders[i].candidate.describe();
    }
  }
}

// Simulates `contenders` on the option's threads; reports progress from this thread.
std::vector<Outcome> simulate_contenders(const std::vector<PlannedJob>& contenders,
                                         const ClusterSpec& cluster,
                                         const std::map<CostKey, std::vector<LayerCost>>& costs,
                                         const PlanOptions& o, PlanProgress progress, int64_t memory_budget) {
  std::vector<Outcome> outcomes(contenders.size());
  SimulationQueue q;
  const int64_t cores = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < std::min<int64_t>(cores, static_cast<int64_t>(contenders.size())); ++t) {
    try {
      threads.emplace_back([&] { simulate_from(q, outcomes, contenders, cluster, costs, o); });
    } catch (const std::system_error&) {
      break;  // as many as the system gives
    }
  }
  if (threads.empty()) simulate_from(q, outcomes, contenders, cluster, costs, o);
  const double before = progress.elapsed_s;             // the plan's time before these simulations
  const int64_t simulated_before = progress.simulated;  // in rounds before this one
  std::unique_lock<std::mutex> lock(q.mutex);
  while (q.done < contenders.size()) {
    q.finished.wait_for(lock, std::chrono::milliseconds(250));
    if (!o.progress) continue;
    fold_progress(outcomes, contenders, memory_budget, simulated_before, progress);
    progress.elapsed_s = before + q.elapsed();
    lock.unlock();
    o.progress(progress);
    lock.lock();
  }
  lock.unlock();
  for (auto& t : threads) t.join();
  return outcomes;
}

// A simulated contender ranked, or refused with why.
void place_outcome(PlannedJob p, Outcome& outcome, Plan& plan) {
  if (outcome.skipped) {
    p.refused = "not simulated: the time budget ran out";
    ++plan.unsimulated_budget;
    plan.pruned.push_back(std::move(p));
    return;
  }
  ++plan.simulated;
  auto& result = *outcome.result;
  if (!result || !result->error.empty()) {
    p.refused = result ? result->error : result.error().message;
    plan.refused.push_back(std::move(p));
    return;
  }
  p.step_ms = result->step_ms_median();
  p.tokens_per_s = static_cast<double>(result->tokens) / (p.step_ms / 1e3);
  p.bubble = result->bubble;
  p.exposed_comm_ms = result->exposed_comm_ms;
  p.peak_bytes = peak_in_memory(*result, p.offloaded_bytes);
  if (plan.smallest_need == 0 || p.peak_bytes < plan.smallest_need) plan.smallest_need = p.peak_bytes;
  if (p.peak_bytes > plan.memory_budget) {
    p.refused = fmt::format("a rank would hold {:.2f} GB, more than its {:.2f} GB", p.peak_bytes / 1e9,
                            plan.memory_budget / 1e9);
    plan.refused.push_back(std::move(p));
    return;
  }
  plan.ranked.push_back(std::move(p));
}

// Fastest first; among those the simulation cannot tell apart, the simplest.
void rank_simulated(Plan& plan) {
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(),
                   [](const PlannedJob& a, const PlannedJob& b) { return a.step_ms < b.step_ms; });
  const double close = plan.ranked.front().step_ms * (1 + kTie);
  auto simplest =
      std::min_element(plan.ranked.begin(), plan.ranked.end(), [&](const PlannedJob& a, const PlannedJob& b) {
        const bool a_close = a.step_ms <= close, b_close = b.step_ms <= close;
        if (a_close != b_close) return a_close;
        return a_close && complexity(a.candidate) < complexity(b.candidate);
      });
  std::rotate(plan.ranked.begin(), simplest, simplest + 1);
}

}  // namespace

Result<Plan> plan_job(const JobConfig& base, const ClusterSpec& cluster, const LayerCostSource& layers,
                      const PlanOptions& options) {
  const auto began = Clock::now();
  Plan plan;
  plan.memory_budget = memory_budget(cluster);
  std::map<CostKey, std::vector<LayerCost>> costs;
  std::vector<PlannedJob> estimated;
  TROUPE_TRY(estimate_candidates(base, cluster, layers, costs, plan, estimated));
  std::stable_sort(estimated.begin(), estimated.end(),
                   [](const PlannedJob& a, const PlannedJob& b) { return a.estimate_ms < b.estimate_ms; });
  PlanProgress progress;
  progress.considered = plan.considered;
  // Rounds: the contenders, then, while none of those simulated fits, the next
  // simulate_top estimates (a fast layout's activations may not fit what its estimate does).
  std::size_t done = 0, round = first_contenders(estimated, options);
  bool out_of_time = false;
  while (round > 0) {
    std::vector<PlannedJob> contenders(std::make_move_iterator(estimated.begin() + done),
                                       std::make_move_iterator(estimated.begin() + done + round));
    done += round;
    progress.pruned = plan.pruned_memory + static_cast<int64_t>(estimated.size() - done);
    progress.contenders += static_cast<int64_t>(contenders.size());
    progress.elapsed_s = std::chrono::duration<double>(Clock::now() - began).count();
    if (options.progress) options.progress(progress);
    PlanOptions remaining = options;
    if (options.budget_s > 0) remaining.budget_s = std::max(1e-3, options.budget_s - progress.elapsed_s);
    auto outcomes = simulate_contenders(contenders, cluster, costs, remaining, progress, plan.memory_budget);
    for (std::size_t i = 0; i < contenders.size(); ++i)
      place_outcome(std::move(contenders[i]), outcomes[i], plan);
    progress.simulated = plan.simulated;
    progress.elapsed_s = std::chrono::duration<double>(Clock::now() - began).count();
    out_of_time = options.budget_s > 0 && progress.elapsed_s >= options.budget_s;
    round =
        plan.ranked.empty() && !out_of_time
            ? std::min<std::size_t>(estimated.size() - done, static_cast<std::size_t>(options.simulate_top))
            : 0;
  }
  if (!estimated.empty())
    leave_unsimulated(estimated.begin() + done, estimated.end(), estimated.front().estimate_ms, done,
                      out_of_time && plan.ranked.empty(), options, plan);
  if (plan.ranked.empty() && plan.refused.empty() && plan.pruned.empty())
    return make_error(fmt::format("{}: no layout divides {} ranks and the global batch of {}", base.source,
                                  cluster.world(), base.batch.global_batch_size));
  if (!plan.ranked.empty()) rank_simulated(plan);
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
