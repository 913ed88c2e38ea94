// A rank's part of the pipeline: where it sits in the dp × pp grid, which layers its stage
// runs, and its stage's program for one step. Derived identically on every rank from the
// config and the model, so no rank has to be told.
// Thread safety: plan_pipeline reads the model; the plan is a plain value.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/micro_batch.hpp"
#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/layout.hpp"
#include "pipeline/topology.hpp"
#include "runtime/config/config.hpp"
#include "runtime/stage_programs.hpp"

namespace troupe {

/// A tensor the layers of several stages use (DeepSpeed's TiedLayerSpec): each of those
/// stages holds a copy, and their gradients are summed between them every step.
struct PipelineTie {
  std::vector<int64_t> stages;  ///< in order; the first owns the tensor (its copy is the one saved)
  std::string name;             ///< where the model first uses it
  std::size_t tensor = 0;       ///< its index among the whole model's parameters
};

/// One of a stage's parameters, as that stage lays them out (its layers' first-use order).
struct StageTensor {
  int64_t elements = 0;
  bool copy = false;       ///< tied, and an earlier stage owns it
  std::size_t tensor = 0;  ///< its index among the whole model's parameters
};

struct PipelinePlan {
  pipeline::Grid grid;  ///< every rank's place: dp × pp in [parallel] order
  pipeline::RankPlace place;
  pipeline::Layout layout;            ///< where the model's chunks sit: one per rank, or v (virtual stages)
  std::vector<int64_t> layer_counts;  ///< by virtual stage (by stage when v = 1)
  std::vector<std::vector<StageTensor>> stage_tensors;  ///< by virtual stage
  std::vector<PipelineTie> ties;                        ///< in model order
  /// By tie: its index among this rank's stage's parameters, or -1 when the stage does not use it.
  std::vector<int64_t> tie_parameter;
  pipeline::Program program;  ///< this rank's actions for one step, every chunk's

  /// Stage `s`'s parameter elements, copies of tied weights included.
  int64_t stage_elements(std::size_t s) const;
  /// The first layer of virtual stage `s`.
  int64_t first_layer_of(int64_t s) const;
  /// The virtual stage chunk `chunk` of this rank is.
  int64_t virtual_stage(int64_t chunk) const { return layout.virtual_stage(place.stage, chunk); }
};

/// What one micro-batch's forward and backward cost each layer, in seconds (the best of a
/// few runs), for [pipeline] partition = "profile". Leaves no gradient behind.
std::vector<double> profile_layers(torch::nn::Sequential layers, const MicroBatch& batch,
                                   const LossFunction& loss);

/// The plan of `rank`; `costs` by layer are used when the partition is "profile". An error
/// names the config key (too many stages, counts that do not add up, a schedule the
/// simulator finds stuck).
Result<PipelinePlan> plan_pipeline(const JobConfig& job, const torch::nn::Sequential& layers, int64_t rank,
                                   const std::vector<double>& costs = {});

/// The layers [first, first + count) of `all`, the same modules under the same names.
torch::nn::Sequential stage_layers(torch::nn::Sequential all, int64_t first, int64_t count);

}  // namespace troupe
