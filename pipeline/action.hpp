// The actions of a pipeline rank's program: what one rank does in one training step, in
// order. A schedule (schedule.hpp) is a pure function that writes each rank's program;
// the scheduler actor walks it, and simulate() checks it before anything runs.
//
// With virtual stages a rank holds several model chunks (layout.hpp); every action of a
// micro-batch names the chunk it belongs to. The backward may run whole (`backward`) or
// split in two, as the zero-bubble schedules do: `backward_input` makes the gradient of
// the chunk's input, which the previous stage waits for, and `backward_weight` the
// gradients of its weights, which nothing downstream waits for.
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace troupe::pipeline {

enum class Op : uint8_t {
  load,              ///< take micro-batch `micro` from the data loader (first and last stage)
  forward,           ///< the chunk's layers forward on micro-batch `micro` (the last adds the loss)
  backward,          ///< the whole backward of micro-batch `micro` through the chunk's layers
  backward_input,    ///< the backward's first half: the gradient of the chunk's input only
  backward_weight,   ///< its second half: the gradients of the chunk's weights
  send_activation,   ///< the forward's output to the next stage
  recv_activation,   ///< the previous stage's output, the forward's input
  send_gradient,     ///< the gradient of the forward's input to the previous stage
  recv_gradient,     ///< the next stage's gradient of this stage's output
  reduce_gradients,  ///< the step's gradients across the stage's data-parallel group
  optimizer_step,    ///< the stage's optimizer step (after global clipping)
};
constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::optimizer_step) + 1;

/// One action; `micro` is -1 for the step-wide ones (reduce_gradients, optimizer_step),
/// whose chunk is 0: they cover every chunk of the rank.
struct Action {
  Op op = Op::forward;
  int64_t micro = -1;
  int64_t chunk = 0;
  bool operator==(const Action& other) const {
    return op == other.op && micro == other.micro && chunk == other.chunk;
  }
};

/// One rank's actions for one step, in the order it runs them.
using Program = std::vector<Action>;

/// What a schedule is written for: one step of a pipeline.
struct ScheduleShape {
  int64_t stages = 1;          ///< p: the ranks of one pipeline
  int64_t micro_batches = 1;   ///< m: the step's gradient-accumulation micro-batches
  int64_t virtual_stages = 1;  ///< v: model chunks per rank
};

inline bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}
/// The action that makes the gradient of a chunk's input: a whole or an input backward.
inline bool makes_input_gradient(Op op) {
  return op == Op::backward || op == Op::backward_input;
}

/// "forward", "recv_gradient", ...
const char* op_name(Op op);
/// "forward 3", "backward_weight 2 (chunk 1)", "optimizer_step".
std::string describe(const Action& action);

/// A compute action's short name, as pictures draw it and schedule tables write it:
/// F (forward), B (whole backward), I (input half), W (weight half), then the
/// micro-batch, then ".chunk" when the rank holds more than one chunk: "F3", "I3.1".
std::string short_name(const Action& action, bool with_chunk);
/// The compute action a short name names; an error says what the names look like.
Result<Action> parse_short_name(std::string_view name);

}  // namespace troupe::pipeline
