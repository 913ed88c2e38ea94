// Copies of a GPU rank's partition between device memory and host arrays, for a checkpoint
// of a partition that no offload tier holds (the fused Adam's on the device): array a's
// shard k is tensors[a][k] on the device and, in the host array, the elements after the
// earlier shards' (a checkpoint's shard coordinates, actors/protocol/checkpoint.hpp). The
// copies are stream work on the rank's d2h or h2d stream, never a synchronous copy on an
// actor's or the compute thread; the host arrays are page-locked where the device can.
// Thread safety: issue from the thread that orders the owner's work (the shard owner's
// actor thread), which also makes that work wait for the copies; `done` runs on whichever
// thread completes them.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "actors/device_rank.hpp"
#include "actors/stream.hpp"
#include "memory/host_buffer.hpp"

namespace troupe {

enum class ShardCopy { to_host, to_device };

/// Elements of every shard of one array, summed.
std::size_t shard_elements(const std::vector<torch::Tensor>& shards);

/// `count` host arrays of `elements` fp32 values each, page-locked through `device.pin`
/// when it has one (else pageable, with a warning); `reuse` is taken where its arrays are
/// the right size and nobody else holds them (the checkpoint writer let go).
std::vector<std::shared_ptr<HostBuffer>> shard_arrays(const DeviceRank& device, std::size_t count,
                                                      std::size_t elements,
                                                      std::vector<std::shared_ptr<HostBuffer>> reuse = {});

/// Copies every array between `tensors` and `arrays` on `copies`, after the work `after`
/// covers; `done` once the copies have run.
void copy_shards(Stream& copies, const Event& after, ShardCopy direction,
                 const std::vector<std::vector<torch::Tensor>>& tensors,
                 const std::vector<std::shared_ptr<HostBuffer>>& arrays, std::function<void()> done);

}  // namespace troupe
