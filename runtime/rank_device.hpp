// RankDevice: the device a rank's actors compute on, opened by the engine before they
// start — a GPU (GpuRank), or CPU streams standing in for one (StandInDevice) so the
// device path runs where no GPU is. The stage and shard owner see only the DeviceRank
// that spawn() returns; the engine sees only this.
// Thread safety: the engine's thread; outlives the actors it serves.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <memory>

#include "actors/device_rank.hpp"
#include "actors/staged_comm.hpp"
#include "base/result.hpp"
#include "memory/memory_ledger.hpp"

namespace troupe {

class RankDevice {
 public:
  virtual ~RankDevice() = default;
  /// Moves `model`'s parameters and buffers into the device's memory, and waits (bounded)
  /// until they are there.
  virtual Status adopt(torch::nn::Sequential& model) = 0;
  /// Starts the rank's device collectives actor; once. `places`: where this rank is in
  /// each communicator the transport made (collectives staged through host memory may
  /// name any of them).
  virtual DeviceRank spawn(caf::actor_system& system, caf::actor comm_agent,
                           std::shared_ptr<MemoryLedger> ledger, CommunicatorPlaces places) = 0;
  /// From now on an error on the device's streams stops `stage` (stage_failed) instead of
  /// only being logged, so the step fails with it instead of running into its time limit.
  virtual void report_errors_to(caf::actor stage) = 0;
};

}  // namespace troupe
