// GpuRank: the GPU of one rank ([cluster] device = "cuda"), opened by the engine before
// its actors start: the rank's four CUDA streams (compute, h2d, d2h, comm), the NCCL
// communicator bootstrapped over troupe's transport (every rank opens it together), and
// LibTorch's external-stream guard for the compute stream. spawn() then starts the actor
// that runs collectives on device memory — NCCL's one issuer, or, with [cluster]
// share_gpus or in a build without NCCL, the staged one that moves them through host
// memory and the comm agent — and
// returns what the stage and its shard owner need (actors/device_rank.hpp).
//
// A build without CUDA, or whose LibTorch has none (Debian's), gets an error from open()
// that says so (runtime/gpu_rank_none.cpp, or the check in gpu_rank.cpp).
// Thread safety: the engine's thread; outlives the actors it serves.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <memory>
#include <vector>

#include "actors/device_rank.hpp"
#include "base/result.hpp"
#include "base/trace.hpp"
#include "memory/memory_ledger.hpp"
#include "runtime/rank_device.hpp"
#include "transport/transport.hpp"

namespace troupe {

class GpuRank final : public RankDevice {
 public:
  /// Opens GPU `device` for this rank; collective over `transport` (the NCCL bootstrap):
  /// an NCCL group for the world and for each of `groups` (the transport's communicators
  /// this rank's device collectives name: its data-parallel groups, its tied weights'),
  /// made in the order of their ids on every rank, so members meet whatever else they are in.
  /// `staged`: no NCCL (ranks share GPUs, which NCCL refuses); collectives are staged
  /// through host memory and the comm agent instead, on every rank alike.
  static Result<std::unique_ptr<GpuRank>> open(Transport& transport, int device, double timeout_s,
                                               Tracer* tracer, bool staged = false,
                                               std::vector<CommunicatorId> groups = {});
  ~GpuRank() override;
  GpuRank(const GpuRank&) = delete;
  GpuRank& operator=(const GpuRank&) = delete;

  /// Moves `model` to the GPU on the compute stream.
  Status adopt(torch::nn::Sequential& model) override;
  DeviceRank spawn(caf::actor_system& system, caf::actor comm_agent, std::shared_ptr<MemoryLedger> ledger,
                   CommunicatorPlaces places) override;
  /// CUDA errors on the rank's streams.
  void report_errors_to(caf::actor stage) override;

 private:
  GpuRank() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
