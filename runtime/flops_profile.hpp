// `troupe profile FILE`: DeepSpeed's flops-profiler table for the job's model, in this
// process: per layer its parameters, the FLOPs of its forward and backward (from shapes,
// runtime/model/model_flops.hpp) and their measured times, the rate each reaches, and the
// totals per micro-batch and per step.
// Thread safety: run from one thread; uses torch's global generator and thread count.
#pragma once

#include <string>
#include <vector>

#include <torch/nn/modules/container/sequential.h>

#include "actors/micro_batch.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// Each layer's forward and backward time on `batch`, in seconds, the best of `repeats`
/// passes (after one that warms the allocator and the kernels up).
struct LayerTimes {
  std::vector<double> forward;
  std::vector<double> backward;
  std::vector<double> backward_input;   ///< with `split`: the backward's input half (weights deferred)
  std::vector<double> backward_weight;  ///< with `split`: the deferred weight half
  /// Every timed pass's whole forward and whole backward (all layers; not the split passes),
  /// in the order run: how much one pass varies from the next here, which the chosen times hide.
  std::vector<double> pass_forward;
  std::vector<double> pass_backward;
};
/// `typical`: each layer's median pass instead of its best (what a training step meets).
/// `split`: also as many passes of the split backward that zero-bubble schedules run (the
/// halves cost more than a whole backward on a CPU: two autograd traversals, smaller products).
/// `warmup_s`: untimed passes for this long first, so that the timed ones meet the machine
/// as a run does after its first steps (a virtual machine's cores can slow down under
/// sustained load; a quick measurement from idle misses that).
LayerTimes time_layers(torch::nn::Sequential layers, const MicroBatch& batch, const LossFunction& loss,
                       int repeats, bool typical = false, bool split = false, double warmup_s = 0);

/// What this process's matrix products reach with its threads: a square product of `n`
/// in `dtype` ("fp32", "bf16", "fp16"), FLOP/s, the best of a few. MFU's denominator.
double gemm_peak_flops(int64_t n, const std::string& dtype);

/// The built-in GPT's matrix-product FLOPs of one step over the whole global batch.
double model_step_flops(const JobConfig& job);

/// Prints the table (or one JSON object) for `job`; returns the exit code. `typical`: each
/// layer's median pass rather than its best; `warmup_s` as time_layers'.
int run_flops_profile(const JobConfig& job, int repeats, bool json, bool typical = false,
                      double warmup_s = 0);

}  // namespace troupe
