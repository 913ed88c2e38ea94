#include "sim/trace_passes.hpp"

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/median.hpp"
#include "pipeline/simulate.hpp"

namespace troupe::sim {

PassCosts pass_costs(const nlohmann::json& trace, int64_t first_step) {
  static const std::regex pass(R"((forward|backward|backward_input|backward_weight) (\d+)\.\d+\.\d+)");
  std::vector<double> forward, backward, input, weight;
  const nlohmann::json& events = trace.is_object() ? trace.at("traceEvents") : trace;
  for (const nlohmann::json& e : events) {
    if (e.value("ph", "") != "X" || !e.contains("name")) continue;
    std::smatch match;
    const std::string name = e["name"].get<std::string>();
    if (!std::regex_match(name, match, pass) || std::stoll(match[2].str()) < first_step) continue;
    const double ms = e.at("dur").get<double>() / 1e3;
    const std::string kind = match[1].str();
    (kind == "forward"          ? forward
     : kind == "backward"       ? backward
     : kind == "backward_input" ? input
                                : weight)
        .push_back(ms);
  }
  PassCosts c;
  c.passes = static_cast<int64_t>(forward.size() + backward.size() + input.size() + weight.size());
  c.forward_ms = upper_median(std::move(forward));
  c.backward_ms = upper_median(std::move(backward));
  c.input_ms = upper_median(std::move(input));
  c.weight_ms = upper_median(std::move(weight));
  return c;
}

Result<double> planned_bubble(const std::string& schedule, const pipeline::ScheduleShape& shape,
                              const PassCosts& costs) {
  auto programs = pipeline::make_programs(schedule, shape);
  if (!programs) return programs.error();
  auto slots = [](double ms) { return std::max<int64_t>(1, std::llround(ms * 10)); };
  const bool halves = costs.input_ms > 0 && costs.weight_ms > 0;
  const double whole = costs.backward_ms > 0 ? costs.backward_ms : costs.input_ms + costs.weight_ms;
  const double input_share = halves ? costs.input_ms / (costs.input_ms + costs.weight_ms) : 0.5;
  pipeline::Costs c;
  c.forward = slots(costs.forward_ms);
  c.backward_input = slots(halves ? costs.input_ms : whole * input_share);
  c.backward_weight = slots(halves ? costs.weight_ms : whole * (1 - input_share));
  auto run = pipeline::simulate(*programs, pipeline::layout_of(schedule, shape), shape.micro_batches, 2, c);
  if (!run) return run.error();
  return run->bubble();
}

}  // namespace troupe::sim
