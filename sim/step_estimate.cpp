#include "sim/step_estimate.hpp"

#include <algorithm>
#include <cmath>

#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"
#include "pipeline/topology.hpp"
#include "sim/link_model.hpp"

namespace troupe::sim {
namespace {

// Slots per costliest pass when the schedule's programs are timed: fine enough that a
// chunk's forward and backward halves keep their ratio within a few percent.
constexpr double kSlotsPerPass = 24;

struct PassCosts {
  Nanos forward = 0, backward_input = 0, backward_weight = 0;
};

// The slowest hop between neighbouring stages for `bytes` (their first replica's ranks).
Nanos hop(const JobConfig& job, const LinkModel& links, int64_t bytes) {
  const pipeline::Grid grid{job.parallel.dp, job.parallel.pp, job.parallel.order, job.parallel.tp};
  Nanos slowest = 0;
  for (int64_t s = 0; s + 1 < job.parallel.pp; ++s)
    slowest =
        std::max(slowest, links.point_to_point(bytes, grid.rank_of(s, 0, 0), grid.rank_of(s + 1, 0, 0)));
  return slowest;
}

// The costliest chunk's passes: the pipeline runs at its slowest stage's pace. A forward
// hands its activation to the next stage and an input gradient goes back before the
// neighbour can start, so each carries its hop.
PassCosts slowest_chunk(const JobConfig& job, const LinkModel& links, const JobCosts& costs) {
  PassCosts p;
  for (const ChunkCost& c : costs.chunks) {
    const Nanos input = c.backward_input > 0 ? c.backward_input : c.backward / 2;
    const Nanos weight = c.backward_weight > 0 ? c.backward_weight : c.backward - c.backward / 2;
    const Nanos transfer = hop(job, links, c.boundary_bytes);
    p.forward = std::max(p.forward, c.forward + transfer);
    p.backward_input = std::max(p.backward_input, input + transfer);
    p.backward_weight = std::max(p.backward_weight, weight);
  }
  return p;
}

// The pipeline's passes over `micro` micro-batches, timed by the schedule's programs.
Result<StepEstimate> passes(const JobConfig& job, const LinkModel& links, const JobCosts& costs) {
  const int64_t micro = job.batch.gradient_accumulation_steps;
  StepEstimate e;
  if (job.parallel.pp == 1) {
    Nanos per_micro = 0;
    for (const ChunkCost& c : costs.chunks) per_micro += c.forward + c.backward;
    e.passes_ms = nanos_to_ms(per_micro * micro);
    return e;
  }
  const PassCosts p = slowest_chunk(job, links, costs);
  const pipeline::ScheduleShape shape{job.parallel.pp, micro, costs.layout.chunks};
  auto programs = pipeline::make_programs(job.pipeline.schedule, shape);
  if (!programs) return programs.error();
  const double unit = std::max<double>(
      1.0, static_cast<double>(std::max({p.forward, p.backward_input, p.backward_weight})) / kSlotsPerPass);
  auto slots = [unit](Nanos n) { return std::max<int64_t>(1, std::llround(static_cast<double>(n) / unit)); };
  pipeline::Costs c{slots(p.forward), slots(p.backward_input), slots(p.backward_weight)};
  auto run = pipeline::simulate(*programs, costs.layout, micro, 2, c);
  if (!run) return run.error();
  e.passes_ms = nanos_to_ms(static_cast<Nanos>(static_cast<double>(run->slots) * unit));
  e.bubble = run->bubble();
  return e;
}

// After the last backward, on pipeline stage `s`: what of its gradient reduction overlap
// leaves exposed, its update and ZeRO 1-2's gather; ZeRO 2-3's per-micro-batch reductions
// beyond what the passes hide are added too.
double tail_ms(const JobConfig& job, const LinkModel& links, const JobCosts& costs, int64_t s,
               double passes_ms) {
  const StageCost& stage = costs.stages[static_cast<std::size_t>(s)];
  double tail = nanos_to_ms(std::max(stage.optimizer, stage.swap));
  if (job.parallel.dp == 1) return tail;
  const pipeline::Grid grid{job.parallel.dp, job.parallel.pp, job.parallel.order, job.parallel.tp};
  auto place = pipeline::place(grid, grid.rank_of(s, 0, 0));
  if (!place) return tail;
  const std::vector<int64_t>& group = place->data_parallel_group;
  if (stage.gather_bytes > 0) tail += nanos_to_ms(links.all_gather(stage.gather_bytes, group));
  if (stage.reduce_bytes == 0) return tail;
  const int64_t micro = job.batch.gradient_accumulation_steps;
  const bool each_micro = job.zero.policy().reduces_every_micro_batch();
  const double reduce =
      nanos_to_ms(stage.scatter ? links.reduce_scatter(stage.reduce_bytes, group, each_micro)
                                : links.all_reduce(stage.reduce_bytes, group, each_micro));
  // Rows of reduce_bucket_size go as the backward makes them final: the last row's share
  // is left after it, or the whole when the reduction outlasts the backward.
  const double elements = std::max<double>(1.0, static_cast<double>(stage.parameters));
  const double last_row = job.zero.overlap_comm
                              ? std::min(1.0, static_cast<double>(job.zero.reduce_bucket_size) / elements)
                              : 1.0;
  double last_backward = 0;
  for (const ChunkCost& c : costs.chunks) last_backward = std::max(last_backward, nanos_to_ms(c.backward));
  const double exposed = job.zero.overlap_comm ? std::max(reduce * last_row, reduce - last_backward) : reduce;
  tail += exposed;
  if (each_micro) {
    // The other micro-batches' reductions run beside the passes, or past them.
    const double beside = reduce * static_cast<double>(micro - 1);
    tail += job.zero.overlap_comm ? std::max(0.0, beside - passes_ms) : beside;
  }
  return tail;
}

}  // namespace

Result<StepEstimate> estimate_step(const JobConfig& job, const ClusterSpec& cluster, const JobCosts& costs) {
  const LinkModel links(cluster);
  auto e = passes(job, links, costs);
  if (!e) return e.error();
  for (int64_t s = 0; s < job.parallel.pp; ++s)
    e->tail_ms = std::max(e->tail_ms, tail_ms(job, links, costs, s, e->passes_ms));
  e->step_ms = e->passes_ms + e->tail_ms;
  return e;
}

}  // namespace troupe::sim
