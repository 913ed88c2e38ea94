// GpuRank in a build without CUDA: open() says so; nothing else is reachable.
#include "runtime/gpu_rank.hpp"

#include "base/check.hpp"

namespace troupe {

struct GpuRank::Impl {};

GpuRank::~GpuRank() = default;

Result<std::unique_ptr<GpuRank>> GpuRank::open(Transport&, int, double, Tracer*, bool,
                                               std::vector<CommunicatorId>) {
  return make_error(
      "[cluster] device = \"cuda\": this troupe was built without CUDA (no CUDA toolkit was found when "
      "it was configured); use device = \"cpu\"");
}

Status GpuRank::adopt(torch::nn::Sequential&) {
  TROUPE_CHECK(false, "a GpuRank exists only in a build with CUDA");
  return {};
}

DeviceRank GpuRank::spawn(caf::actor_system&, caf::actor, std::shared_ptr<MemoryLedger>, CommunicatorPlaces) {
  TROUPE_CHECK(false, "a GpuRank exists only in a build with CUDA");
  return {};
}

void GpuRank::report_errors_to(caf::actor) {}

}  // namespace troupe
