// What a job needs of this machine, checked before anything is allocated or started, so
// that a job too big for it stops with both figures instead of being killed by the kernel,
// and a path a run would fail on is named before the first step. `troupe check`, the
// launcher of `troupe run` and every rank of the built-in job ask the same questions.
//
// Memory: each rank holds its model states (runtime/estimate.hpp, the figure MemoryLedger
// measures), the activations autograd keeps for one micro-batch of the built-in GPT (fp32:
// per block 10·b·s·d + 2·b·s·d_ff + 2·b·n_heads·s², plus 3·b·s·vocab for the logits and
// their gradient), its corpus (a synthetic one is made in memory), and what a rank process
// holds before any of it (LibTorch and the actor runtime, measured). The sum times the
// ranks on this machine must fit in the host's MemAvailable. It is a floor, not a bound:
// a job refused by it would surely have failed; one it admits may still be too tight.
// Thread safety: functions read /proc and the file system only.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// Bytes of memory a rank of the built-in job needs at least, by part.
struct RankMemoryDemand {
  double model_states = 0;  ///< parameters, gradients, optimizer state, buffers (the estimate)
  double activations = 0;   ///< one micro-batch's saved activations and logits
  double corpus = 0;        ///< the synthetic corpus, or the data file read into memory
  double process = 0;       ///< a rank process before the job's own memory
  double total() const { return model_states + activations + corpus + process; }
};

/// What a rank of the resolved built-in job needs (no tensor is made).
Result<RankMemoryDemand> rank_memory_demand(const JobConfig& job);

/// MemAvailable of /proc/meminfo, in bytes.
Result<int64_t> host_available_bytes();

/// Refuses, with both figures, a job whose `local_ranks` ranks would not fit in this
/// host's available memory. `who` says which ranks ("the 4 ranks troupe run starts").
Status check_host_memory(const JobConfig& job, int64_t local_ranks, const std::string& who);

/// The paths a run writes: the nvme tier's directory (it or its parent must exist and be a
/// writable directory), the metrics file's and the trace's directories. Errors name the
/// key and the path.
Status check_output_paths(const JobConfig& job, const std::string& metrics_path);

}  // namespace troupe
