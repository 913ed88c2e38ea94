// Tensor-parallel layers for a trainer's own model (Megatron-LM's), trained by troupe's
// engine with [parallel] tp > 1:
//
//   auto config = troupe::load_config_file("job.toml", {});
//   auto group = troupe::Engine::tensor_parallel_group(*config);   // this rank's place
//   torch::manual_seed(config->train.seed);                         // the same draws everywhere
//   troupe::tp::ColumnParallelLinear up(*group, 512, 2048);          // rows split over the group
//   troupe::tp::RowParallelLinear down(*group, 2048, 512);           // columns split, output summed
//   ... layers, a loss (troupe::tp::vocab_parallel_cross_entropy for split logits) ...
//   troupe::Trainable t{layers, loss, data, {}, {}, *group};         // bound when the engine starts
//
// Each layer takes its shard of the weights the plain layer of the same shape would draw,
// so a model made of them trains as the plain model does. See
// runtime/model/tensor_parallel.hpp for every layer and operator.
#pragma once

#include "runtime/model/tensor_parallel.hpp"
#include "troupe/troupe.hpp"
