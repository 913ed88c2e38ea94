#include "pipeline/action.hpp"

#include <cctype>

#include <fmt/format.h>

namespace troupe::pipeline {
namespace {

char letter_of(Op op) {
  switch (op) {
    case Op::forward:
      return 'F';
    case Op::backward:
      return 'B';
    case Op::backward_input:
      return 'I';
    case Op::backward_weight:
      return 'W';
    default:
      return '?';
  }
}

// The digits at the front of `text`, as a number; -1 when there are none or too many.
int64_t leading_number(std::string_view& text) {
  std::size_t n = 0;
  while (n < text.size() && std::isdigit(static_cast<unsigned char>(text[n]))) ++n;
  if (n == 0 || n > 9) return -1;
  int64_t value = 0;
  for (std::size_t i = 0; i < n; ++i) value = value * 10 + (text[i] - '0');
  text.remove_prefix(n);
  return value;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::load:
      return "load";
    case Op::forward:
      return "forward";
    case Op::backward:
      return "backward";
    case Op::backward_input:
      return "backward_input";
    case Op::backward_weight:
      return "backward_weight";
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
  if (action.chunk == 0) return fmt::format("{} {}", op_name(action.op), action.micro);
  return fmt::format("{} {} (chunk {})", op_name(action.op), action.micro, action.chunk);
}

std::string short_name(const Action& action, bool with_chunk) {
  if (!with_chunk) return fmt::format("{}{}", letter_of(action.op), action.micro);
  return fmt::format("{}{}.{}", letter_of(action.op), action.micro, action.chunk);
}

Result<Action> parse_short_name(std::string_view name) {
  auto refuse = [&] {
    return make_error(fmt::format(
        "\"{}\" is not an action: actions are F (forward), B (whole backward), I (input-gradient half "
        "of a backward) or W (weight-gradient half), then the micro-batch, then .chunk with virtual stages: "
        "F3, I3, W3, B3, F3.1",
        name));
  };
  if (name.empty()) return refuse();
  Action action;
  switch (name.front()) {
    case 'F':
      action.op = Op::forward;
      break;
    case 'B':
      action.op = Op::backward;
      break;
    case 'I':
      action.op = Op::backward_input;
      break;
    case 'W':
      action.op = Op::backward_weight;
      break;
    default:
      return refuse();
  }
  std::string_view rest = name.substr(1);
  action.micro = leading_number(rest);
  if (action.micro < 0) return refuse();
  if (!rest.empty()) {
    if (rest.front() != '.') return refuse();
    rest.remove_prefix(1);
    action.chunk = leading_number(rest);
    if (action.chunk < 0 || !rest.empty()) return refuse();
  }
  return action;
}

}  // namespace troupe::pipeline
