#include "runtime/stand_in_device.hpp"

#include <caf/all.hpp>

#include <cstdlib>
#include <mutex>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/protocol/stage.hpp"
#include "actors/staged_comm.hpp"
#include "actors/stream.hpp"

namespace troupe {

Result<bool> device_path_on_cpu() {
  const char* value = std::getenv(kDevicePathVariable);
  if (value == nullptr || *value == '\0') return false;
  if (std::string(value) == "cpu") return true;
  return make_error(
      fmt::format("{}={}: the one device path a CPU can stand in for is \"cpu\" (unset it for the "
                  "host path)",
                  kDevicePathVariable, value));
}

// Where a stream's error goes: logged, and once the engine names the stage, the stage,
// through a weak handle (as GpuRank's: the streams outlive the actor system).
struct StandInDevice::Errors {
  std::mutex mutex;
  caf::weak_actor_ptr stage;
  void report(const std::string& what) {
    spdlog::error("device path on the CPU: {}", what);
    std::lock_guard lock(mutex);
    if (auto strong = stage.lock()) caf::anon_send(caf::actor_cast<caf::actor>(strong), stage_failed{what});
  }
};

StandInDevice::StandInDevice(Tracer* tracer) : errors_(std::make_shared<Errors>()) {
  auto report = [errors = errors_](const std::string& what) { errors->report(what); };
  compute_ = CpuStream::make("device", tracer, report);
  d2h_ = CpuStream::make("d2h", tracer, report);
  h2d_ = CpuStream::make("h2d", tracer, report);
}

StandInDevice::~StandInDevice() = default;

Status StandInDevice::adopt(torch::nn::Sequential&) {
  return {};
}

DeviceRank StandInDevice::spawn(caf::actor_system& system, caf::actor comm_agent,
                                std::shared_ptr<MemoryLedger> ledger, CommunicatorPlaces places) {
  DeviceRank d;
  d.stream = compute_;
  d.d2h = d2h_;
  d.h2d = h2d_;
  d.collectives = spawn_staged_comm(system, StagedCommOptions{std::move(comm_agent), d2h_, h2d_,
                                                              std::move(places), std::move(ledger), nullptr});
  return d;
}

void StandInDevice::report_errors_to(caf::actor stage) {
  std::lock_guard lock(errors_->mutex);
  errors_->stage = caf::actor_cast<caf::weak_actor_ptr>(stage);
}

}  // namespace troupe
