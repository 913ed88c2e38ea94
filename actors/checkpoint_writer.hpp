// The checkpoint writer actor: one per rank, it writes what the rank's save hands it into
// the checkpoint's staging folder on a stream of its own (the trace's "checkpoint" track),
// so training goes on while the files reach the disk, and no actor thread waits on I/O.
//
// Every rank writes its own files (they are addressed by parameter and element range, not
// by rank: memory/checkpoint_ranges.hpp), fsyncs them, and tells rank 0's writer which
// files it wrote, with their sizes and CRC32Cs (a message through the comm agent). Rank 0's
// writer commits the checkpoint once every rank's list is in (memory/checkpoint_dir.hpp:
// the manifest last, then the rename), and prunes to keep_last. A save any rank failed (a
// full disk) is never committed; the previous checkpoint stays the latest, and the failing
// rank's engine stops the job naming the path.
//
// Protocol (actors/protocol/checkpoint_writer.hpp): write_checkpoint; await_checkpoint{step}
// → checkpoint_saved once that save is done (rank 0: committed; elsewhere: this rank's
// files durable), or for step -1 once none is pending (with the first failure, if any).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdint>
#include <string>

#include "base/trace.hpp"

namespace troupe {

struct CheckpointWriterOptions {
  std::string root;  ///< [checkpoint] dir, shared by every rank
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t keep_last = 2;
  std::string meta = "{}";  ///< rank 0: the manifest's meta object (JSON)
  caf::actor comm_agent;    ///< registers the writer and carries the file lists to rank 0
  double timeout_s = 600;   ///< rank 0 gives up on a save whose lists do not all arrive
  /// Fault injection (TROUPE_CHECKPOINT_WRITE_DELAY_MS): each save waits this long in its
  /// staging folder before writing, as on a slow disk, so a kill lands inside saves.
  std::chrono::milliseconds write_delay{0};
  Tracer* tracer = nullptr;
};

caf::actor spawn_checkpoint_writer(caf::actor_system& system, CheckpointWriterOptions options);

}  // namespace troupe
