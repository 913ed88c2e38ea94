// `troupe estimate`: the model-state bytes each rank will hold, predicted before a run.
//
// estimate_job() takes the job's GPT from its shapes alone (model_shape: no tensor is made, so
// a 70 B model plans in milliseconds and a few MB), lays its parameters out as the runtime
// will (plan_zero over the model's layers, a tied weight once) and asks estimate_model_state() what
// each rank holds at the peak of a step, by kind, beside the ZeRO paper's formula for
// comparison. The figures are what the runtime's MemoryLedger measures and
// `troupe run --metrics` reports (parameter_bytes, gradient_bytes, ...).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "memory/memory_ledger.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// pp > 1: what one pipeline stage's ranks hold.
struct StageEstimate {
  int64_t stage = 0;
  int64_t first_layer = 0;
  int64_t layers = 0;
  int64_t params = 0;  ///< its parameters, a copy of a weight tied to an earlier stage included
  int64_t model_state_bytes = 0;
  /// The activations it keeps between a micro-batch's forward and backward at the peak (the
  /// stage's input and output tensors, MemoryKind::activations): 1f1b holds min(m, pp − s)
  /// micro-batches, gpipe all m; with checkpointing the outputs are not kept.
  int64_t activation_bytes = 0;
  MemoryBytes bytes;  ///< model state and communication buffers one of its ranks holds, by kind
};

struct ModelStateEstimate {
  std::string file;  ///< the config the job came from
  ZeroPolicy zero;   ///< what its ZeRO stage partitions
  int64_t dp = 1;
  int64_t params = 0;  ///< the model's parameter count
  /// Bytes one rank holds at the peak of a step, by kind.
  MemoryBytes bytes;
  /// Where the kinds live: "host" on CPU ranks; "device" on GPU ranks ([cluster] device =
  /// "cuda"), whose optimizer state is in `optimizer_state_tier` ("device", or "host" with
  /// an [offload] optimizer tier; nvme_optimizer_state_bytes then says what is on disk).
  std::string tier = "host";
  std::string optimizer_state_tier;  ///< set on GPU ranks only
  /// GPU ranks: the parameters, gradients, bucket slots and (without a tier) optimizer
  /// state in device memory; stage 3 leaves out the live window, as model_state does. 0 on
  /// CPU ranks. What `troupe run --metrics` measures as device_bytes.
  int64_t device_bytes = 0;
  /// [precision] dtype: "fp32", or "bf16"/"fp16" (2-byte parameters and gradients, an fp32
  /// master copy with the optimizer state).
  Dtype dtype = Dtype::fp32;
  /// The ZeRO paper's model-state bytes per parameter for this stage and dp: fp32
  /// everywhere 4 (parameters) + 4 (gradients) + 4 × optimizer states (Adam: 16; 8 + 8/N;
  /// 4 + 12/N; 16/N); mixed precision 2 + 2 + K with K = 4 × (states + 1) (Adam: 16;
  /// 4 + 12/N; 2 + 14/N; 16/N); the partitioned kinds divided by dp. Stage 3 leaves out
  /// the live window of gathered parameters (below).
  double formula_bytes_per_param = 0;
  /// The formula as text, e.g. "4 + 12/N".
  std::string formula;
  /// [offload] optimizer = "nvme": the optimizer state held in the nvme tier (the host
  /// holds only the swap buffers, in bytes[optimizer_state]); 0 otherwise.
  int64_t nvme_optimizer_state_bytes = 0;
  /// [offload] param = "nvme" (stage 3): this rank's parameter blocks held in the nvme
  /// tier (the host keeps the persistent rows and the gathered ones); 0 otherwise.
  int64_t nvme_parameter_bytes = 0;
  /// Stage 3: elements gathered at the peak, the persistent row included
  /// (stage3_peak_gathered); 0 for other stages.
  int64_t live_window_elements = 0;
  /// pp > 1: every stage; the figures above are then those of the stage whose ranks hold
  /// the most model state (`heaviest`), its params that stage's.
  int64_t pp = 1;
  /// tp > 1: each rank holds its tensor-parallel shard; params is the shard's count.
  int64_t tp = 1;
  std::vector<StageEstimate> stages;
  int64_t heaviest = 0;
  int64_t model_params = 0;    ///< the whole model's parameters (= params when pp = tp = 1)
  std::string partition_note;  ///< how the layers were cut, when it is not what the run does
};

/// Bytes autograd keeps inside one transformer block for one micro-batch until its backward
/// (Korthikanti et al. 2022: s·b·h·(34 + 5·a·s/h) at 16 bits; tensor parallelism divides the
/// attention and MLP parts, sequence parallelism all; recompute keeps the block's input).
double autograd_block_bytes(const JobConfig& job);

/// The most one rank holds at the peak of a step: model state, communication buffers, the
/// activations its schedule keeps and, for each micro-batch it keeps, autograd's bytes.
Result<int64_t> peak_rank_bytes(const JobConfig& job);

/// [batch] micro_batch_size = "auto" (DeepSpeed's autotuning, without trial runs): the
/// largest micro-batch that divides a replica's share of the global batch, runs the
/// schedule, and keeps peak_rank_bytes within memory_budget_bytes (0: this machine's
/// memory over the job's ranks); sets it and the accumulation and says so in warnings. An
/// error names the key when even one sequence does not fit.
Status choose_micro_batch(JobConfig& job);

/// A GPU rank's job against its device: the estimate's device bytes (stage 3: with its
/// live window) and the activations of peak_rank_bytes, times the `ranks` that share the
/// device ([cluster] share_gpus), must fit in `free_bytes` (what the CUDA runtime reports
/// free before the model moves there; for a shared GPU its total, the others' use of it
/// being counted already).
/// The error gives the estimate, the free bytes and the keys that would make it fit.
Status check_fits_device(const JobConfig& job, int64_t free_bytes, int64_t ranks, const std::string& device);

/// The estimate for a resolved job; fails with a sentence when the job cannot be planned.
Result<ModelStateEstimate> estimate_job(const JobConfig& job);

/// A header line, the table by kind (bytes per rank, bytes per parameter) and the formula.
std::string render_estimate(const ModelStateEstimate& estimate);

/// One JSON object (one line): file, stage, dp, params, parameters_bytes, gradients_bytes,
/// optimizer_state_bytes, communication_bytes, model_state_bytes, formula (the text, e.g.
/// "4 + 12/N"), formula_bytes_per_param, tier and, for stage 3, live_window_elements;
/// on GPU ranks device_bytes and optimizer_state_tier;
/// with pp > 1 also pp, heaviest_stage, model_params and stages (one object each: stage,
/// first_layer, layers, params, model_state_bytes, activation_bytes).
std::string estimate_json(const ModelStateEstimate& estimate);

}  // namespace troupe
