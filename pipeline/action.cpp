#include "pipeline/action.hpp"

#include <fmt/format.h>

namespace troupe::pipeline {

const char* op_name(Op op) {
  switch (op) {
    case Op::load:
      return "load";
    case Op::forward:
      return "forward";
    case Op::backward:
      return "backward";
    case Op::send_activation:
      return "send_activation";
    case Op::recv_activation:
      return "recv_activation";
    case Op::send_gradient:
      return "send_gradient";
    case Op::recv_gradient:
      return "recv_gradient";
    case Op::reduce_gradients:
      return "reduce_gradients";
    case Op::optimizer_step:
      return "optimizer_step";
  }
  return "unknown";
}

std::string describe(const Action& action) {
  if (action.micro < 0) return op_name(action.op);
  return fmt::format("{} {}", op_name(action.op), action.micro);
}

}  // namespace troupe::pipeline
