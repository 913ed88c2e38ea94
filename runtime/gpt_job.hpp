// The built-in job: the GPT of [model] on the byte-level corpus of [data], trained
// by one rank through the Engine API (`troupe rank`, started by `troupe run`), or by
// the plain-LibTorch reference in one process (`troupe run --reference`).
#pragma once

#include <string>

#include "base/result.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

struct Trainable;  // troupe/troupe.hpp, which includes this

/// The built-in GPT of `job` as the Engine trains it: its layers (tp > 1: this rank's
/// shards, over its tensor-parallel group), loss, FLOPs per layer and the micro-batches of
/// the byte-level corpus. Seeds LibTorch's generator with [train] seed first.
Result<Trainable> make_gpt_trainable(const JobConfig& job);

struct JobOutputs {
  std::string metrics_path;     ///< JSON lines, one per step (rank 0); empty = none
  std::string parameters_path;  ///< final parameters as raw fp32 (rank 0); empty = none
};

/// Trains as one rank of the cluster; returns the process exit code.
int run_gpt_rank(const JobConfig& job, const JobOutputs& outputs);

/// Trains the same model on the same global batches in one process, no actors.
int run_gpt_reference(const JobConfig& job, const JobOutputs& outputs);

}  // namespace troupe
