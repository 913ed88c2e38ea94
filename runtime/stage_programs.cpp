#include "runtime/stage_programs.hpp"

#include <fmt/format.h>

#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"
#include "pipeline/table.hpp"
#include "runtime/config/resolve.hpp"

namespace troupe {

Result<std::vector<pipeline::Program>> stage_programs(const JobConfig& job) {
  // One stage runs its micro-batches forward then backward, one at a time, whatever the
  // schedule: the 1f1b program of a single stage.
  const bool piped = job.parallel.pp > 1;
  const int64_t micro = job.batch.gradient_accumulation_steps, chunks = pipeline_chunks(job);
  if (piped && !job.pipeline.schedule_file.empty()) {
    const pipeline::Layout table{job.parallel.pp, chunks, pipeline::ChunkLayout::interleaved};
    auto programs = pipeline::load_schedule_table(job.pipeline.schedule_file, table, micro);
    if (!programs) return make_error(fmt::format("[pipeline] schedule_file: {}", programs.error().message));
    return programs;
  }
  const std::string schedule = piped ? job.pipeline.schedule : "1f1b";
  pipeline::ScheduleShape shape{job.parallel.pp, micro, chunks};
  auto programs = pipeline::make_programs(schedule, shape);
  if (!programs) return programs.error();
  if (auto checked = pipeline::simulate(*programs, pipeline::layout_of(schedule, shape), micro); !checked)
    return make_error(fmt::format("[pipeline] schedule \"{}\": {}", schedule, checked.error().message));
  if (pipeline::splits_backward(*programs) && job.zero.policy().gathers_before_use())
    return make_error(
        fmt::format("[pipeline] schedule \"{}\" splits backwards into input and weight halves, "
                    "which [zero] stage = 3 does not run yet: use stage 0-2",
                    schedule));
  return programs;
}

pipeline::Layout pipeline_layout(const JobConfig& job) {
  const int64_t chunks = pipeline_chunks(job);
  return job.pipeline.schedule_file.empty()
             ? pipeline::layout_of(job.pipeline.schedule, {job.parallel.pp, 1, chunks})
             : pipeline::Layout{job.parallel.pp, chunks, pipeline::ChunkLayout::interleaved};
}

}  // namespace troupe
