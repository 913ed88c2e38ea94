#include "runtime/devices.hpp"

#include <fmt/format.h>

#include "kernels/devices.hpp"

namespace troupe {

Status check_cuda_devices(const Result<int>& devices, int64_t local_rank, int64_t local_world_size,
                          bool share) {
  if (!devices)
    return make_error(
        fmt::format("[cluster] device = \"cuda\", but {}; use device = \"cpu\"", devices.error().message));
  if (*devices == 0)
    return make_error("[cluster] device = \"cuda\", but this host has no CUDA device; use device = \"cpu\"");
  if (local_world_size > *devices && !share)
    return make_error(fmt::format(
        "[cluster] device = \"cuda\" gives each rank a GPU of its own, but this host runs {} ranks and has "
        "{} "
        "CUDA device{} (local rank {} has none); run at most {} rank{} per host, set [cluster] share_gpus = "
        "true to share them (collectives staged through host memory), or use device = \"cpu\"",
        local_world_size, *devices, *devices == 1 ? "" : "s", local_rank >= *devices ? local_rank : *devices,
        *devices, *devices == 1 ? "" : "s"));
  return {};
}

Status check_cuda_devices(int64_t local_rank, int64_t local_world_size, bool share) {
  return check_cuda_devices(kernels::cuda_device_count(), local_rank, local_world_size, share);
}

}  // namespace troupe
