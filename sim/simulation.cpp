#include "sim/simulation.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <chrono>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/protocol/scheduler.hpp"
#include "actors/scheduler.hpp"
#include "pipeline/schedule.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/stage_programs.hpp"
#include "sim/services.hpp"
#include "sim/sim_stage.hpp"

namespace troupe::sim {
namespace {

// What the ranks reported, by rank and step.
struct Reports {
  std::vector<std::vector<step_report>> by_rank;
  std::vector<std::vector<Nanos>> ended;  // by rank and step: when the report came
  int64_t finished = 0;                   // ranks done with every step
};

void train(caf::event_based_actor* self, World* w, const std::vector<caf::actor>* schedulers, Reports* out,
           int64_t rank, int64_t step, int64_t steps) {
  w->ledgers[static_cast<std::size_t>(rank)]->reset_peaks();
  self->request((*schedulers)[static_cast<std::size_t>(rank)], caf::infinite, train_step{step})
      .then(
          [=](step_report& r) {
            out->by_rank[static_cast<std::size_t>(rank)].push_back(r);
            out->ended[static_cast<std::size_t>(rank)].push_back(w->clock.now());
            if (!r.error.empty()) {
              if (!w->failure) w->failure = fmt::format("rank {}, step {}: {}", rank, step, r.error);
              return;
            }
            if (step + 1 < steps)
              train(self, w, schedulers, out, rank, step + 1, steps);
            else
              ++out->finished;
          },
          [=](caf::error& e) {
            if (!w->failure) w->failure = fmt::format("rank {}'s scheduler failed: {}", rank, to_string(e));
          });
}

// Stands in for each rank's Engine (the embedding API): asks every rank's scheduler actor
// for its steps, each rank's one after another.
caf::behavior engine_stand_in(caf::event_based_actor* self, World* w,
                              const std::vector<caf::actor>* schedulers, Reports* out, int64_t steps) {
  for (int64_t r = 0; r < w->ranks(); ++r) train(self, w, schedulers, out, r, 0, steps);
  return {[](int64_t) {}};
}

SchedulerOptions scheduler_options(World& w, int64_t rank, const pipeline::Program& program,
                                   const caf::actor& loader, const caf::actor& comm) {
  const JobConfig& job = w.job;
  const pipeline::RankPlace& place = w.places[static_cast<std::size_t>(rank)];
  SchedulerOptions o;
  o.chunks = w.chunks[static_cast<std::size_t>(rank)];
  o.data_loader = loader;
  o.comm_agent = comm;
  o.program = program;
  o.micro_count = job.batch.gradient_accumulation_steps;
  o.stages = job.parallel.pp;
  o.world_rank = rank;
  o.world_size = w.ranks();
  o.window = 4 * job.parallel.pp + 4;  // as the engine: room for every receive a stage posts ahead
  o.fetch_timeout_s = 1e6;             // the coordinator's timeouts never fire: the clock is ours
  o.clock = [&w] { return w.clock.time_point(); };
  if (job.parallel.pp > 1 && job.pipeline.schedule_file.empty())
    if (pipeline::EventSchedulerFactory make = pipeline::event_scheduler(job.pipeline.schedule)) {
      o.policy =
          make(pipeline::ScheduleShape{job.parallel.pp, o.micro_count, w.costs.layout.chunks}, place.stage);
      o.policy_name = job.pipeline.schedule;
      o.layout = w.costs.layout;
      o.stage = place.stage;
      o.split_backward = pipeline::splits_backward(program);
      o.ledger = w.ledgers[static_cast<std::size_t>(rank)];
    }
  return o;
}

void charge_model_state(World& w) {
  for (int64_t r = 0; r < w.ranks(); ++r) {
    const StageCost& stage =
        w.costs.stages[static_cast<std::size_t>(w.places[static_cast<std::size_t>(r)].stage)];
    for (MemoryKind kind : {MemoryKind::parameters, MemoryKind::gradients, MemoryKind::optimizer_state,
                            MemoryKind::communication})
      w.ledgers[static_cast<std::size_t>(r)]->set(kind, stage.model_state[kind]);
  }
}

void schedule_faults(World& w) {
  for (const Fault& f : w.cluster.faults)
    if (f.kind == FaultKind::dead_rank)
      w.clock.at(seconds_to_nanos(f.at_s), [&w, f] {
        w.fail_after_timeout(
            fmt::format("rank {} stopped (dead_rank fault at {} ms, {})", f.rank, f.at_s * 1e3, f.origin));
      });
}

std::string stuck_ranks(const World& w) {
  std::vector<std::string> stuck;
  for (int64_t r = 0; r < w.ranks() && stuck.size() < 8; ++r)
    for (std::size_t c = 0; c < w.waiting_at[static_cast<std::size_t>(r)].size(); ++c)
      if (const auto& a = w.waiting_at[static_cast<std::size_t>(r)][c])
        stuck.push_back(fmt::format("rank {} chunk {} at {}", r, c, pipeline::describe(*a)));
  return fmt::format("the simulated job stopped with nothing left to happen: {}", fmt::join(stuck, "; "));
}

// The measured noise the ranks replayed, in three numbers for the report.
void summarize_noise(const ClusterSpec& cluster, SimulationResult& out) {
  std::vector<double> noise;
  for (const std::vector<double>& passes : cluster.noise)
    noise.insert(noise.end(), passes.begin(), passes.end());
  if (noise.empty()) return;
  std::sort(noise.begin(), noise.end());
  out.noise_passes = static_cast<int64_t>(noise.size());
  out.noise_mean = std::accumulate(noise.begin(), noise.end(), 0.0) / static_cast<double>(noise.size());
  out.noise_p90 = noise[noise.size() * 9 / 10];
}

void summarize(const World& w, const Reports& reports, int64_t steps, SimulationResult& out) {
  const int64_t done_steps = steps;
  Nanos previous = 0;
  for (int64_t k = 0; k < done_steps; ++k) {
    Nanos end = 0;
    bool all = true;
    for (const auto& ended : reports.ended) {
      if (static_cast<int64_t>(ended.size()) <= k)
        all = false;
      else
        end = std::max(end, ended[static_cast<std::size_t>(k)]);
    }
    if (!all) break;
    out.step_ms.push_back(nanos_to_ms(end - previous));
    previous = end;
  }
  const int64_t counted = std::max<int64_t>(1, static_cast<int64_t>(out.step_ms.size()));
  out.stages.resize(static_cast<std::size_t>(w.job.parallel.pp));
  for (std::size_t s = 0; s < out.stages.size(); ++s) out.stages[s].stage = static_cast<int64_t>(s);
  double bubble = 0, exposed = 0;
  for (int64_t r = 0; r < w.ranks(); ++r) {
    const auto& mine = reports.by_rank[static_cast<std::size_t>(r)];
    StageFigures& stage = out.stages[static_cast<std::size_t>(w.places[static_cast<std::size_t>(r)].stage)];
    int64_t peak = 0;
    for (const step_report& report : mine) {
      const StepStats& st = report.stats;
      peak = std::max(peak, st.model_state_bytes + st.communication_bytes + st.activation_bytes);
      stage.model_state_bytes = std::max(stage.model_state_bytes, st.model_state_bytes);
      stage.communication_bytes = std::max(stage.communication_bytes, st.communication_bytes);
      stage.activation_bytes = std::max(stage.activation_bytes, st.activation_bytes);
    }
    double idle = 0;  // this rank's, averaged over its steps: one step's is one draw of the noise
    for (const step_report& report : mine) idle += report.stats.bubble / static_cast<double>(mine.size());
    bubble += idle;
    stage.bubble += idle / static_cast<double>(w.ranks() / w.job.parallel.pp);
    const RankFigures& f = w.figures[static_cast<std::size_t>(r)];
    exposed += nanos_to_ms(f.exposed) / static_cast<double>(counted);
    stage.peak_bytes = std::max(stage.peak_bytes, peak);
    stage.busy_ms = std::max(stage.busy_ms, nanos_to_ms(f.busy) / static_cast<double>(counted));
    stage.exposed_comm_ms =
        std::max(stage.exposed_comm_ms, nanos_to_ms(f.exposed) / static_cast<double>(counted));
    if (peak > out.peak_bytes) {
      out.peak_bytes = peak;
      out.peak_rank = r;
    }
  }
  out.bubble = bubble / static_cast<double>(w.ranks());
  summarize_noise(w.cluster, out);
  out.exposed_comm_ms = exposed / static_cast<double>(w.ranks());
  out.step_flops = w.costs.step_flops;
  out.tokens = w.costs.micro_tokens * w.job.batch.gradient_accumulation_steps * w.job.parallel.dp;
  auto rate = w.cluster.device.gemm_rate(name_of(w.job.precision.dtype));
  const double step_s = out.step_ms_median() / 1e3;
  if (rate && step_s > 0) out.mfu = out.step_flops / (step_s * static_cast<double>(w.ranks()) * *rate);
}

}  // namespace

double SimulationResult::step_ms_median() const {
  if (step_ms.empty()) return 0;
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

Result<SimulationResult> simulate_job(const JobConfig& job, const ClusterSpec& cluster,
                                      const std::vector<LayerCost>& layers,
                                      const SimulationOptions& options) {
  const auto began = std::chrono::steady_clock::now();
  auto costs = job_costs(job, cluster, layers);
  if (!costs) return costs.error();
  auto programs = stage_programs(job);
  if (!programs) return make_error(fmt::format("{}: {}", job.source, programs.error().message));
  World world(job, cluster, std::move(*costs), options.trace);
  const int64_t ranks = world.ranks(), chunks = world.costs.layout.chunks;
  world.waiting_at.assign(static_cast<std::size_t>(ranks),
                          std::vector<std::optional<pipeline::Action>>(static_cast<std::size_t>(chunks)));
  world.chunks.resize(static_cast<std::size_t>(ranks));
  charge_model_state(world);
  schedule_faults(world);

  Reports reports;
  reports.by_rank.resize(static_cast<std::size_t>(ranks));
  reports.ended.resize(static_cast<std::size_t>(ranks));
  std::vector<caf::actor> schedulers;
  {
    caf::actor_system_config config;
    config.set("scheduler.policy", caf::atom("testing"));
    config.set("logger.verbosity", caf::atom("quiet"));
    caf::actor_system system{config};
    auto& coordinator = dynamic_cast<caf::scheduler::test_coordinator&>(system.scheduler());
    caf::actor collectives = spawn_collectives(system, world);
    caf::actor loader = spawn_sim_data_loader(system, world);
    caf::actor comm = spawn_world_comm(system, world, &schedulers);
    for (int64_t r = 0; r < ranks; ++r)
      for (int64_t c = 0; c < chunks; ++c)
        world.chunks[static_cast<std::size_t>(r)].push_back(
            spawn_sim_stage(system, world, r, c, collectives));
    for (int64_t r = 0; r < ranks; ++r) {
      const auto& program =
          (*programs)[static_cast<std::size_t>(world.places[static_cast<std::size_t>(r)].stage)];
      schedulers.push_back(spawn_scheduler(system, scheduler_options(world, r, program, loader, comm)));
    }
    caf::actor engines = system.spawn(engine_stand_in, &world, &schedulers, &reports, options.steps);
    while (true) {
      coordinator.run();
      if (world.failure || reports.finished == ranks) break;
      if (!world.clock.advance()) break;
    }
    // Every actor goes before the system does: nothing is left to run on the coordinator.
    for (const auto& rank : world.chunks)
      for (const caf::actor& a : rank) caf::anon_send_exit(a, caf::exit_reason::kill);
    for (const caf::actor& a : schedulers) caf::anon_send_exit(a, caf::exit_reason::kill);
    for (const caf::actor& a : {collectives, loader, comm, engines})
      caf::anon_send_exit(a, caf::exit_reason::kill);
    coordinator.run();
    world.chunks.clear();
    schedulers.clear();
    system.await_actors_before_shutdown(false);
  }

  SimulationResult result;
  result.ranks = ranks;
  result.places = world.places;
  if (world.failure)
    result.error = *world.failure;
  else if (reports.finished < ranks)
    result.error = stuck_ranks(world);
  summarize(world, reports, options.steps, result);
  result.events = world.clock.fired();
  result.timeline = std::move(world.timeline);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return result;
}

}  // namespace troupe::sim
