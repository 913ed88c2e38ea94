// The offload manager actor: owns the memory tiers of one rank's optimizer state
// (ZeRO-Offload / ZeRO-Infinity) and runs the optimizer over the partition with troupe's
// fused CPU kernels (kernels/cpu/optimizer.hpp).
//
//   in memory:   the state lives in host memory; a pass updates every sub-group.
//   on NVMe (state_on_nvme): the state lives in files (memory/nvme_store.hpp), one per sub-group,
//                and moves through a bounded pool of swap buffers. A pass reads the state
//                of the next sub-groups while the current one is updated on the stream
//                and the previous ones are written back — read i+1, update i, write i−1 —
//                with at most buffer_count sub-groups in flight, so a step takes about
//                max(I/O time, compute time) instead of their sum.
//   parameters on NVMe (parameters_on_nvme; stage 3, either tier): the swapped rows live in a
//                ParameterSwap; each of their pieces is a sub-group whose parameters
//                travel in the same swap buffer as its state: read, update, write back.
//
// Sub-groups are the partition's blocks cut to at most sub_group_size elements, smaller
// when host_budget_bytes could not otherwise hold buffer_count swap buffers; the manager
// never holds more host memory than the budget. Every result is the same, bit for bit, in
// either tier: the kernel is elementwise and sees the same state.
//
// Protocol (actors/protocol/offload.hpp): optimizer_pass → optimizer_pass_done. A
// failure (a tier that cannot be opened, a full disk, a corrupted swap file) is the
// pass's error, naming the path and the operation; the manager then refuses further
// passes. Between passes, a checkpoint (actors/protocol/checkpoint.hpp): snapshot_state →
// state_snapshot copies the partition's fp32 values, state and step counts out of the
// tiers; restore_state → state_restored puts them back (the nvme tier's files rewritten,
// the 16-bit copy rounded again from the restored masters).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/trace.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "memory/memory_ledger.hpp"
#include "memory/parameter_runs.hpp"
#include "memory/parameter_swap.hpp"
#include "optim/lr_schedule.hpp"

namespace troupe {

/// What the optimizer does to each element (LibTorch's AdamW, Adam or SGD semantics).
struct OptimizerRule {
  enum class Kind { adamw, adam, sgd };
  Kind kind = Kind::adamw;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  double momentum = 0;
  bool nesterov = false;
  /// fp32 values of optimizer state per parameter element.
  int64_t states_per_element() const { return kind == Kind::sgd ? (momentum != 0 ? 1 : 0) : 2; }
  /// This rule for one update whose rate or betas a schedule sets.
  OptimizerRule with(const UpdateHyper& hyper) const {
    OptimizerRule r = *this;
    r.lr = hyper.lr.value_or(lr);
    r.beta1 = hyper.beta1.value_or(beta1);
    r.beta2 = hyper.beta2.value_or(beta2);
    return r;
  }
};

/// A contiguous run of the partition: parameters and their (reduced) gradients. With
/// the parameters on NVMe (`parameters` null) the span is stage-3 row `row`'s block,
/// and its pieces in the ParameterSwap are swapped with their state. `runs` says which
/// parameter each element belongs to (padding belongs to none): a pass updates only the
/// runs of the parameters it is told were used, each at its own step count.
/// Mixed precision: `parameters` are the fp32 master values, the gradients are 16-bit
/// (`gradients16`, `gradients` null) or fp32 when they were reduced in fp32, and the
/// updated values are written, rounded, to
/// `copy16` (the model's 16-bit parameters) in the same pass.
struct PartitionSpan {
  float* parameters = nullptr;
  float* gradients = nullptr;
  std::size_t count = 0;
  std::size_t row = 0;
  std::vector<ParameterRun> runs;
  uint16_t* gradients16 = nullptr;
  uint16_t* copy16 = nullptr;
  kernels::Precision16 precision = kernels::Precision16::none;

  /// The span's elements [at, at + n).
  PartitionSpan slice(std::size_t at, std::size_t n) const;
};

/// The fused kernels' Adam/AdamW arguments for `rule` at (1-based) step `step`.
kernels::AdamParams adam_params_of(const OptimizerRule& rule, int64_t step);

struct OffloadOptions {
  bool state_on_nvme = false;       ///< the optimizer state in files (the nvme tier), else in host memory
  bool parameters_on_nvme = false;  ///< stage 3: the parameter partition on NVMe too
  std::string nvme_dir;             ///< this rank's folder of the nvme tier (made if missing)
  int64_t host_budget_bytes = 0;    ///< 0 = no limit
  int64_t sub_group_size = 100000000;
  int64_t buffer_count = 4;
  int64_t block_size = 1048576;
  int64_t queue_depth = 8;
  DirectIo direct_io = DirectIo::prefer;
};

struct OffloadManagerOptions {
  OffloadOptions offload;
  OptimizerRule rule;
  std::vector<PartitionSpan> partition;
  /// Owns the memory `partition` points into; the manager keeps it alive until its
  /// stream has stopped (an update may still be queued when the rank shuts down).
  std::shared_ptr<void> partition_owner;
  /// Where the spans with null parameters live ([offload] param = "nvme").
  std::shared_ptr<ParameterSwap> parameter_swap;
  int64_t threads = 1;  ///< threads of the fused kernel
  double io_timeout_s = 120;
  Tracer* tracer = nullptr;
  std::shared_ptr<MemoryLedger> ledger;
};

caf::actor spawn_offload_manager(caf::actor_system& system, OffloadManagerOptions options);

/// The nvme tier of a rank: its folder `o.nvme_dir` (made if missing) and a store there
/// with the options' block size and queue depth. Errors name [offload] nvme_path. The one
/// way the optimizer state, the parameter swap and the engine's start-up check open it.
/// With a tracer, its reads and writes show on the trace's "nvme" track.
Result<std::unique_ptr<NvmeStore>> open_nvme_store(const OffloadOptions& o, double io_timeout_s,
                                                   std::shared_ptr<MemoryLedger> ledger = nullptr,
                                                   Tracer* tracer = nullptr);

}  // namespace troupe
