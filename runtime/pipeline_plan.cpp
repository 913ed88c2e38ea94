#include "runtime/pipeline_plan.hpp"

#include "runtime/flops_profile.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "actors/model_parameters.hpp"
#include "pipeline/schedule.hpp"
#include "runtime/config/resolve.hpp"

namespace troupe {
namespace {

// Each layer's parameter elements (what it owns), for the "parameters" partition.
std::vector<double> layer_elements(const ModelParameters& parameters) {
  std::vector<double> elements;
  for (const auto& owned : parameters.owned_counts()) {
    double sum = 0;
    for (std::size_t n : owned) sum += static_cast<double>(n);
    elements.push_back(sum);
  }
  return elements;
}

// Which stage runs each layer.
std::vector<int64_t> stage_of_layers(const std::vector<int64_t>& counts) {
  std::vector<int64_t> stage_of_layer;
  for (std::size_t s = 0; s < counts.size(); ++s)
    for (int64_t i = 0; i < counts[s]; ++i) stage_of_layer.push_back(static_cast<int64_t>(s));
  return stage_of_layer;
}

// The tensors layers of several stages use, and each stage's parameters as it lays them
// out: a stage's own model_parameters over its layers, each tensor matched to the whole
// model's by identity.
Status plan_ties(const torch::nn::Sequential& layers, const ModelParameters& whole, PipelinePlan& plan) {
  const std::vector<int64_t> stage_of_layer = stage_of_layers(plan.layer_counts);
  std::vector<std::vector<int64_t>> users(whole.tensors.size());  // by tensor: stages, increasing
  auto use = [&](std::size_t tensor, std::size_t layer) {
    auto& stages = users[tensor];
    if (stages.empty() || stages.back() != stage_of_layer[layer]) stages.push_back(stage_of_layer[layer]);
  };
  for (std::size_t layer = 0; layer < whole.owned.size(); ++layer) {
    for (std::size_t t : whole.owned[layer]) use(t, layer);
    for (std::size_t t : whole.borrowed[layer]) use(t, layer);
  }
  std::map<const void*, std::size_t> index_of;  // the whole model's tensors by identity
  for (std::size_t t = 0; t < whole.tensors.size(); ++t) index_of[whole.tensors[t].unsafeGetTensorImpl()] = t;
  std::map<std::size_t, std::size_t> tie_of;  // tensor -> tie
  for (std::size_t t = 0; t < whole.tensors.size(); ++t)
    if (users[t].size() > 1) {
      tie_of[t] = plan.ties.size();
      plan.ties.push_back(PipelineTie{users[t], whole.names[t], t});
    }
  plan.tie_parameter.assign(plan.ties.size(), -1);
  int64_t first = 0;
  for (std::size_t s = 0; s < plan.layer_counts.size(); ++s) {
    auto mine = model_parameters(stage_layers(layers, first, plan.layer_counts[s]));
    if (!mine) return mine.error();
    first += plan.layer_counts[s];
    std::vector<StageTensor> tensors;
    for (std::size_t local = 0; local < mine->tensors.size(); ++local) {
      std::size_t t = index_of.at(mine->tensors[local].unsafeGetTensorImpl());
      tensors.push_back(
          StageTensor{mine->tensors[local].numel(), users[t].front() != static_cast<int64_t>(s), t});
      auto tie = tie_of.find(t);
      if (tie != tie_of.end() && static_cast<int64_t>(s) == plan.place.stage)
        plan.tie_parameter[tie->second] = static_cast<int64_t>(local);
    }
    plan.stage_tensors.push_back(std::move(tensors));
  }
  return {};
}

}  // namespace

std::vector<double> profile_layers(torch::nn::Sequential layers, const MicroBatch& batch,
                                   const LossFunction& loss) {
  LayerTimes times = time_layers(std::move(layers), batch, loss, 3);
  std::vector<double> each(times.forward.size());
  for (std::size_t i = 0; i < each.size(); ++i) each[i] = times.forward[i] + times.backward[i];
  return each;
}

Result<PipelinePlan> plan_pipeline(const JobConfig& job, const torch::nn::Sequential& layers, int64_t rank,
                                   const std::vector<double>& costs) {
  PipelinePlan plan;
  plan.grid = pipeline::Grid{job.parallel.dp, job.parallel.pp, job.parallel.order, job.parallel.tp};
  auto place = pipeline::place(plan.grid, rank);
  if (!place) return place.error();
  plan.place = std::move(*place);
  TROUPE_TRY(check_pipeline_layers(job, static_cast<int64_t>(layers->size()), "the model"));
  auto parameters = model_parameters(layers);
  if (!parameters) return parameters.error();
  auto counts = stage_layer_counts(job, layer_elements(*parameters), costs);
  if (!counts) return counts.error();
  plan.layer_counts = std::move(*counts);
  const int64_t chunks = pipeline_chunks(job);
  plan.layout = pipeline_layout(job);
  TROUPE_TRY(plan_ties(layers, *parameters, plan));
  if (chunks > 1 && !plan.ties.empty())
    return make_error(
        fmt::format("{} is used by more than one virtual stage; weights tied across stages need one "
                    "chunk per rank",
                    plan.ties.front().name));
  auto programs = stage_programs(job);
  if (!programs) return programs.error();
  plan.program = (*programs)[static_cast<std::size_t>(plan.place.stage)];
  return plan;
}

int64_t PipelinePlan::first_layer_of(int64_t s) const {
  int64_t first = 0;
  for (int64_t k = 0; k < s; ++k) first += layer_counts[static_cast<std::size_t>(k)];
  return first;
}

int64_t PipelinePlan::stage_elements(std::size_t s) const {
  int64_t elements = 0;
  for (const StageTensor& t : stage_tensors[s]) elements += t.elements;
  return elements;
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
