// Rank environment: who this process is, as told by whichever launcher started it.
//
// Every multi-process launcher (troupe's own `launch_ranks`, torchrun/DeepSpeed, Open MPI's
// mpirun, SLURM's srun) tells each process its rank through environment variables, each
// with its own names. detect_rank_environment() reads them through an EnvLookup, picks one
// family by a fixed precedence, validates it and returns one RankEnvironment. Lookups go
// through a function so tests can use a map; process_environment() is the one place that
// reads the real environment. The caller logs `source` so a user can see which variables won.
//
// Precedence (only the first family found is read; lower families are not checked):
//   1. TROUPE_RANK / TROUPE_WORLD_SIZE (+ TROUPE_LOCAL_RANK, TROUPE_LOCAL_WORLD_SIZE,
//      TROUPE_COORDINATOR)
//   2. torchrun / DeepSpeed: RANK / WORLD_SIZE (+ LOCAL_RANK, LOCAL_WORLD_SIZE or DeepSpeed
//      launcher's LOCAL_SIZE, MASTER_ADDR + MASTER_PORT as the coordinator; under torchrun,
//      whose agent listens on MASTER_PORT itself (TORCHELASTIC_USE_AGENT_STORE=True), the
//      port after it)
//   3. Open MPI: OMPI_COMM_WORLD_RANK / _SIZE (+ _LOCAL_RANK, _LOCAL_SIZE; the coordinator
//      from MASTER_ADDR + MASTER_PORT, which `mpirun -x` passes, or on one host 127.0.0.1
//      and a port derived from the job's id)
//   4. SLURM: SLURM_PROCID / SLURM_NTASKS (+ SLURM_LOCALID, the step's tasks on this node
//      from SLURM_STEP_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE when every node runs the same
//      number; the coordinator on the first host of SLURM_JOB_NODELIST at MASTER_PORT, or a
//      port derived from SLURM_JOB_ID)
// TROUPE_COORDINATOR, when set, is the coordinator whichever family is read.
// A family is present when its rank or world variable is set; a variable set to the empty
// string counts as unset (the shell idiom `RANK= prog`).
//
// Thread safety: detect_rank_environment is a pure function of its lookup. The lookup from
// process_environment() calls getenv and must not race with setenv.
// Invariants of a returned RankEnvironment: 0 <= rank < world_size,
// 0 <= local_rank < local_world_size <= world_size.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/result.hpp"

namespace troupe {

/// Where this process sits in the job, and which variables said so.
struct RankEnvironment {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;        ///< rank among the processes on this host
  int64_t local_world_size = 1;  ///< processes on this host
  std::string coordinator;       ///< "host:port" where rank 0 listens, or empty if not given
  std::string source;            ///< the variables used, e.g. "TROUPE_RANK/TROUPE_WORLD_SIZE"
  std::string coordinator_source;  ///< the variables the coordinator came from
};

/// Looks up one environment variable by name; nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// An EnvLookup over this process's real environment (getenv).
EnvLookup process_environment();

/// Detects the rank environment set by a launcher. Returns nullopt when no launcher
/// variables are present (a single-process run), and an Error naming the variable, its
/// value and what is allowed when the chosen family is incomplete or malformed.
Result<std::optional<RankEnvironment>> detect_rank_environment(const EnvLookup& lookup);

}  // namespace troupe
