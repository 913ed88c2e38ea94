// What each piece of a step costs on a simulated cluster, from the job and the cluster:
// per virtual stage and micro-batch its forward and the two halves of its backward (with
// the tensor-parallel collectives and the ZeRO-3 gathers their layers wait on), the bytes
// it passes to its neighbour and keeps until its backward; per pipeline stage and step the
// gradients it reduces over its data-parallel group, its optimizer update, the parameters
// it gathers back and the NVMe traffic of its offloaded state, and the model state its
// ranks hold (the same accounting as `troupe estimate`, so the simulator's ledger charges
// what the runtime's does).
//
// Layer times come from one of two places: the layers' FLOPs (runtime/model/model_flops)
// over the device's GEMM rate times the cluster's efficiency, for hardware that is not
// here; or the job's layers timed on this machine (`compute = "measured"`).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "memory/memory_ledger.hpp"
#include "pipeline/layout.hpp"
#include "runtime/config/config.hpp"
#include "sim/cluster.hpp"
#include "sim/virtual_clock.hpp"

namespace troupe::sim {

/// One model layer (embedding, blocks, head) on one rank, for one micro-batch.
struct LayerCost {
  double forward_s = 0;
  double backward_s = 0;  ///< the whole backward: input and weight gradients
  /// The backward split as zero-bubble schedules run it, when measured (0: half of backward_s
  /// each). On a CPU the halves cost more than the whole: two traversals, smaller products.
  double backward_input_s = 0;
  double backward_weight_s = 0;
};

/// One virtual stage, per micro-batch, on one rank.
struct ChunkCost {
  int64_t first_layer = 0;
  int64_t layers = 0;
  int64_t parameters = 0;      ///< its elements on one rank
  Nanos forward = 0;           ///< on the compute stream, its exposed communication included
  Nanos backward = 0;          ///< a whole backward, its exposed communication included
  Nanos backward_input = 0;    ///< the input gradient's half of the backward
  Nanos backward_weight = 0;   ///< the weight gradients' half
  Nanos exposed_forward = 0;   ///< of the forward: communication the layers wait on
  Nanos exposed_backward = 0;  ///< of the whole backward
  /// ZeRO-3: the gathers of the chunk's parameters that a pass (forward, or backward) makes
  /// beside its compute, at full speed: on a CPU host the progress threads' work that shares
  /// the cores with the computes (the exposed part is in the pass's cost already).
  Nanos prefetch = 0;
  int64_t boundary_bytes = 0;  ///< the activation sent to the next virtual stage (its gradient comes back)
  int64_t held_bytes = 0;      ///< kept from forward to backward that troupe's ledger counts
  int64_t saved_bytes = 0;     ///< autograd's saved tensors (flops compute only; the ledger leaves them out)
};

/// One pipeline stage, per rank and step.
struct StageCost {
  int64_t parameters = 0;    ///< elements of the stage on one rank (its tensor-parallel shard)
  MemoryBytes model_state;   ///< bytes by kind that a rank holds at the step's peak
  int64_t reduce_bytes = 0;  ///< gradients reduced over the data-parallel group
  bool scatter = false;      ///< ZeRO ≥ 1: a reduce-scatter, not an all-reduce
  int64_t gather_bytes = 0;  ///< ZeRO 1-2: updated parameters all-gathered after the step
  Nanos optimizer = 0;       ///< the update of this rank's elements
  Nanos swap = 0;            ///< nvme: the offloaded state read and written around the update
};

struct JobCosts {
  pipeline::Layout layout;        ///< where the virtual stages sit
  std::vector<ChunkCost> chunks;  ///< by virtual stage
  std::vector<StageCost> stages;  ///< by pipeline stage
  int64_t micro_tokens = 0;       ///< target tokens of one micro-batch
  double host_capacity = 0;       ///< computes a host runs at full speed at once (0: no limit)
  /// On a CPU host, the part of a compute's processors a collective's progress thread uses
  /// (1 / the rank's compute threads): a host's collectives take cores from its computes.
  double collective_demand = 0;
  double step_flops = 0;          ///< the model's matrix-product FLOPs per step, forward and backward
  std::string compute;            ///< how layer times were found, for the report
};

/// A rank's compute threads: [train] threads, or the host's cores shared by its ranks.
int64_t rank_threads(const JobConfig& job, const ClusterSpec& cluster);

/// Layer times from the layers' FLOPs and the device's GEMM rate for the job's dtype,
/// scaled by the cluster's efficiency. One rank's shard with tp > 1.
Result<std::vector<LayerCost>> flops_layer_costs(const JobConfig& job, const ClusterSpec& cluster);

/// Everything else, from `layers` (by model layer). An error names what cannot be costed.
Result<JobCosts> job_costs(const JobConfig& job, const ClusterSpec& cluster,
                           const std::vector<LayerCost>& layers);

}  // namespace troupe::sim
