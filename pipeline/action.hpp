// The actions of a pipeline stage's program: what one stage does in one training step,
// in order. A schedule (schedule.hpp) is a pure function that writes each stage's program;
// the scheduler actor walks it, and simulate() checks it before anything runs.
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::pipeline {

enum class Op : uint8_t {
  load,              ///< take micro-batch `micro` from the data loader (first and last stage)
  forward,           ///< the stage's layers forward on micro-batch `micro` (the last adds the loss)
  backward,          ///< backward of micro-batch `micro` through the stage's layers
  send_activation,   ///< the forward's output to the next stage
  recv_activation,   ///< the previous stage's output, the forward's input
  send_gradient,     ///< the gradient of the forward's input to the previous stage
  recv_gradient,     ///< the next stage's gradient of this stage's output
  reduce_gradients,  ///< the step's gradients across the stage's data-parallel group
  optimizer_step,    ///< the stage's optimizer step (after global clipping)
};

/// One action; `micro` is -1 for the step-wide ones (reduce_gradients, optimizer_step).
struct Action {
  Op op = Op::forward;
  int64_t micro = -1;
  bool operator==(const Action& other) const { return op == other.op && micro == other.micro; }
};

/// One stage's actions for one step, in the order it runs them.
using Program = std::vector<Action>;

/// "forward", "recv_gradient", ...
const char* op_name(Op op);
/// "forward 3", "optimizer_step".
std::string describe(const Action& action);

}  // namespace troupe::pipeline
