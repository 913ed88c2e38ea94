// StandInDevice: the device path of a GPU rank with CPU streams standing in for its CUDA
// streams (compute, d2h, h2d) and its collectives staged through host memory and the comm
// agent, as on a GPU that NCCL cannot serve. Everything a GPU rank does but the CUDA calls
// themselves — the issuing compute stream, gradients in "device" memory (placed on device
// 0, in host bytes), device collectives, the fused Adam's CPU twin, the host mirror of
// [offload] with its copies — so CI runs the path with no GPU. Chosen with
// TROUPE_DEVICE_PATH=cpu (a test hook, like TROUPE_INJECT_OVERFLOW) on [cluster] device = "cpu".
// Thread safety: the engine's thread; outlives the actors it serves.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/trace.hpp"
#include "runtime/rank_device.hpp"

namespace troupe {

inline constexpr const char* kDevicePathVariable = "TROUPE_DEVICE_PATH";

/// Whether TROUPE_DEVICE_PATH asks for the device path on the CPU ("cpu"); another value
/// is an error naming it.
Result<bool> device_path_on_cpu();

class StandInDevice final : public RankDevice {
 public:
  /// A rank whose collectives are all staged through its host memory and the comm agent.
  explicit StandInDevice(Tracer* tracer);
  ~StandInDevice() override;

  /// The model stays where it is: its "device" memory is the host's.
  Status adopt(torch::nn::Sequential& model) override;
  DeviceRank spawn(caf::actor_system& system, caf::actor comm_agent, std::shared_ptr<MemoryLedger> ledger,
                   CommunicatorPlaces places) override;
  void report_errors_to(caf::actor stage) override;

 private:
  struct Errors;
  std::shared_ptr<Errors> errors_;
  std::shared_ptr<Stream> compute_, d2h_, h2d_;
};

}  // namespace troupe
