#include "pipeline/schedule.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace troupe::pipeline {
namespace {

bool first(const ScheduleShape&, int64_t stage) {
  return stage == 0;
}
bool last(const ScheduleShape& shape, int64_t stage) {
  return stage == shape.stages - 1;
}

// A forward with what it needs around it: the micro-batch (first and last stage: inputs
// and labels), the previous stage's activation before, the output to the next after.
void add_forward(Program& program, const ScheduleShape& shape, int64_t stage, int64_t micro) {
  if (first(shape, stage) || last(shape, stage)) program.push_back({Op::load, micro});
  if (!first(shape, stage)) program.push_back({Op::recv_activation, micro});
  program.push_back({Op::forward, micro});
  if (!last(shape, stage)) program.push_back({Op::send_activation, micro});
}

// A backward: the next stage's gradient before, the input's gradient to the previous after.
void add_backward(Program& program, const ScheduleShape& shape, int64_t stage, int64_t micro) {
  if (!last(shape, stage)) program.push_back({Op::recv_gradient, micro});
  program.push_back({Op::backward, micro});
  if (!first(shape, stage)) program.push_back({Op::send_gradient, micro});
}

void add_step(Program& program) {
  program.push_back({Op::reduce_gradients, -1});
  program.push_back({Op::optimizer_step, -1});
}

Program gpipe(const ScheduleShape& shape, int64_t stage) {
  Program program;
  for (int64_t i = 0; i < shape.micro_batches; ++i) add_forward(program, shape, stage, i);
  for (int64_t i = 0; i < shape.micro_batches; ++i) add_backward(program, shape, stage, i);
  add_step(program);
  return program;
}

// Warm-up forwards fill the pipeline below this stage; then each forward is followed by the
// oldest backward, so at most p − stage micro-batches are held; the cool-down drains it.
Program one_f_one_b(const ScheduleShape& shape, int64_t stage) {
  const int64_t m = shape.micro_batches;
  const int64_t warmup = std::min(shape.stages - stage - 1, m);
  Program program;
  for (int64_t i = 0; i < warmup; ++i) add_forward(program, shape, stage, i);
  for (int64_t i = 0; i < m - warmup; ++i) {
    add_forward(program, shape, stage, warmup + i);
    add_backward(program, shape, stage, i);
  }
  for (int64_t i = m - warmup; i < m; ++i) add_backward(program, shape, stage, i);
  add_step(program);
  return program;
}

}  // namespace

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b"};
  return names;
}

Status check_shape(std::string_view schedule, const ScheduleShape& shape) {
  const auto& names = schedule_names();
  if (std::find(names.begin(), names.end(), schedule) == names.end())
    return make_error(
        fmt::format("unknown schedule \"{}\": the schedules are {}", schedule, fmt::join(names, ", ")));
  if (shape.stages < 1 || shape.micro_batches < 1)
    return make_error(
        fmt::format("a schedule needs at least one stage and one micro-batch (stages {}, "
                    "micro-batches {})",
                    shape.stages, shape.micro_batches));
  if (schedule == "1f1b" && shape.micro_batches < shape.stages)
    return make_error(
        fmt::format("1f1b needs at least as many micro-batches as stages, to fill the "
                    "pipeline: {} micro-batches for {} stages",
                    shape.micro_batches, shape.stages));
  return {};
}

Result<Program> make_program(std::string_view schedule, const ScheduleShape& shape, int64_t stage) {
  TROUPE_TRY(check_shape(schedule, shape));
  if (stage < 0 || stage >= shape.stages)
    return make_error(fmt::format("stage {} is not one of the {} stages", stage, shape.stages));
  return schedule == "gpipe" ? gpipe(shape, stage) : one_f_one_b(shape, stage);
}

Result<std::vector<Program>> make_programs(std::string_view schedule, const ScheduleShape& shape) {
  std::vector<Program> programs;
  for (int64_t stage = 0; stage < shape.stages; ++stage) {
    auto program = make_program(schedule, shape, stage);
    if (!program) return program.error();
    programs.push_back(std::move(*program));
  }
  return programs;
}

}  // namespace troupe::pipeline
