#include "runtime/pipeline_plan.hpp"

#include <torch/torch.h>

#include <chrono>

#include <fmt/format.h>

#include "actors/model_parameters.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"
#include "runtime/config/resolve.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Result<std::vector<int64_t>> layer_counts(const JobConfig& job, const ModelParameters& parameters,
                                          const std::vector<double>& costs) {
  const PipelinePartition& cut = job.pipeline.partition;
  const auto layers = static_cast<int64_t>(parameters.owned.size());
  const int64_t stages = job.parallel.pp;
  if (!cut.counts.empty()) return cut.counts;  // checked against the model by check_pipeline_layers
  if (cut.method == "uniform") return pipeline::partition_uniform(layers, stages);
  std::vector<double> weights;
  if (cut.method == "parameters") {
    for (const auto& owned : parameters.owned_counts()) {
      double sum = 0;
      for (std::size_t n : owned) sum += static_cast<double>(n);
      weights.push_back(sum);
    }
  } else {
    weights = costs;
  }
  return pipeline::partition_balanced(weights, stages);
}

// A tensor used by layers of two stages would need its gradients summed between them.
Status check_no_tie_across_stages(const ModelParameters& parameters, const std::vector<int64_t>& counts) {
  std::vector<int64_t> stage_of_layer;
  for (std::size_t s = 0; s < counts.size(); ++s)
    for (int64_t i = 0; i < counts[s]; ++i) stage_of_layer.push_back(static_cast<int64_t>(s));
  std::vector<int64_t> owner_stage(parameters.tensors.size(), -1);
  for (std::size_t layer = 0; layer < parameters.owned.size(); ++layer)
    for (std::size_t t : parameters.owned[layer]) owner_stage[t] = stage_of_layer[layer];
  for (std::size_t layer = 0; layer < parameters.borrowed.size(); ++layer)
    for (std::size_t t : parameters.borrowed[layer])
      if (owner_stage[t] != stage_of_layer[layer])
        return make_error(fmt::format(
            "parameter {} is used by layer {} on stage {} and owned by stage {}: troupe does not yet sum "
            "the gradients of a weight tied across pipeline stages; place both layers on one stage "
            "([pipeline] partition) or untie them (the built-in GPT: [model] tie_embeddings = false)",
            parameters.names[t], layer, stage_of_layer[layer], owner_stage[t]));
  return {};
}

}  // namespace

std::vector<double> profile_layers(torch::nn::Sequential layers, const MicroBatch& batch,
                                   const LossFunction& loss) {
  std::vector<torch::nn::AnyModule*> modules;
  for (auto& module : *layers) modules.push_back(&module);
  const std::size_t count = modules.size();
  std::vector<double> best(count, 1e300);
  for (int repeat = 0; repeat < 3; ++repeat) {
    std::vector<torch::Tensor> inputs, outputs;
    std::vector<double> took(count, 0);
    torch::Tensor x = batch.input;
    for (std::size_t i = 0; i < count; ++i) {
      torch::Tensor in = x.is_floating_point() ? x.detach().requires_grad_(true) : x;
      auto start = Clock::now();
      torch::Tensor out = modules[i]->forward(in);
      took[i] += seconds_since(start);
      inputs.push_back(in);
      outputs.push_back(out);
      x = out;
    }
    torch::Tensor gradient;
    for (std::size_t k = count; k-- > 0;) {
      auto start = Clock::now();
      if (k + 1 == count)
        loss(outputs[k], batch.target).backward();
      else
        outputs[k].backward(gradient);
      took[k] += seconds_since(start);
      if (inputs[k].requires_grad()) gradient = inputs[k].grad();
    }
    for (std::size_t i = 0; i < count; ++i) best[i] = std::min(best[i], took[i]);
  }
  for (auto& p : layers->parameters()) p.mutable_grad() = torch::Tensor();
  return best;
}

Result<PipelinePlan> plan_pipeline(const JobConfig& job, const torch::nn::Sequential& layers, int64_t rank,
                                   const std::vector<double>& costs) {
  PipelinePlan plan;
  auto order = pipeline::parse_grid_order(job.parallel.order);
  if (!order) return order.error();
  plan.grid = pipeline::Grid{job.parallel.dp, job.parallel.pp, *order};
  auto place = pipeline::place(plan.grid, rank);
  if (!place) return place.error();
  plan.place = std::move(*place);
  TROUPE_TRY(check_pipeline_layers(job, static_cast<int64_t>(layers->size()), "the model"));
  auto parameters = model_parameters(layers);
  if (!parameters) return parameters.error();
  auto counts = layer_counts(job, *parameters, costs);
  if (!counts) return counts.error();
  plan.layer_counts = std::move(*counts);
  TROUPE_TRY(check_no_tie_across_stages(*parameters, plan.layer_counts));
  auto owned = parameters->owned_counts();
  std::size_t layer = 0;
  for (std::size_t s = 0; s < plan.layer_counts.size(); ++s) {
    if (static_cast<int64_t>(s) == plan.place.stage) plan.first_layer = static_cast<int64_t>(layer);
    int64_t elements = 0;
    for (int64_t i = 0; i < plan.layer_counts[s]; ++i, ++layer)
      for (std::size_t n : owned[layer]) elements += static_cast<int64_t>(n);
    plan.stage_elements.push_back(elements);
  }
  // One stage runs its micro-batches forward then backward, one at a time, whatever the
  // schedule: the 1f1b program of a single stage.
  const bool piped = job.parallel.pp > 1;
  const std::string schedule = piped ? job.pipeline.schedule : "1f1b";
  pipeline::ScheduleShape shape{job.parallel.pp, job.batch.gradient_accumulation_steps};
  auto programs = pipeline::make_programs(schedule, shape);
  if (!programs) return programs.error();
  if (auto checked = pipeline::simulate(*programs, shape.micro_batches); !checked)
    return make_error(fmt::format("[pipeline] schedule \"{}\": {}", schedule, checked.error().message));
  plan.program = (*programs)[static_cast<std::size_t>(plan.place.stage)];
  return plan;
}

torch::nn::Sequential stage_layers(torch::nn::Sequential all, int64_t first, int64_t count) {
  torch::nn::Sequential part;
  const auto names = all->named_children().keys();
  int64_t i = 0;
  for (auto& module : *all) {
    if (i >= first && i < first + count) part->push_back(names[static_cast<std::size_t>(i)], module);
    ++i;
  }
  return part;
}

}  // namespace troupe
