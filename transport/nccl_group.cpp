#include "transport/nccl_group.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace troupe {
namespace {

ncclComm_t as_comm(void* c) {
  return static_cast<ncclComm_t>(c);
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::bf16:
      return ncclBfloat16;
    case DataType::f16:
      return ncclFloat16;
    case DataType::f32:
      break;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::average ? ncclAvg : ncclSum;
}

}  // namespace

Result<std::unique_ptr<NcclGroup>> NcclGroup::create(Transport& transport, int device,
                                                     std::chrono::milliseconds timeout,
                                                     CommunicatorId group) {
  auto rank = static_cast<int>(transport.position_in(group)),
       size = static_cast<int>(transport.size_of(group));
  const int64_t who = transport.rank();  // errors name the world's rank
  if (rank < 0)
    return make_error(
        fmt::format("NCCL on rank {}: this rank is not a member of communicator {}", who, group));
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return make_error(
        fmt::format("NCCL on rank {}: selecting GPU {} failed: {}", who, device, cudaGetErrorString(e)));
  ncclUniqueId id{};
  static_assert(sizeof id % sizeof(float) == 0, "the id travels as fp32 words");
  if (rank == 0)
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return make_error(
          fmt::format("NCCL on rank {}: making the unique id failed: {}", who, ncclGetErrorString(r)));
  if (Status sent = transport.broadcast_sync(&id, sizeof id / sizeof(float), DataType::f32, 0, group); !sent)
    return make_error(
        fmt::format("NCCL on rank {}: receiving the unique id failed: {}", who, sent.error().message));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (r == ncclInProgress) {  // poll: a peer that never joins is a timeout, not a hang
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      return make_error(fmt::format("NCCL on rank {}: the {} ranks did not all join within {} ms", who, size,
                                    timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    return make_error(
        fmt::format("NCCL on rank {}: joining the group of {} failed: {}", who, size, ncclGetErrorString(r)));
  }
  return std::unique_ptr<NcclGroup>(new NcclGroup(comm, rank, size, device));
}

NcclGroup::~NcclGroup() {
  if (comm_ == nullptr) return;
  if (aborted_) return;  // abort() released it
  ncclCommDestroy(as_comm(comm_));
}

void NcclGroup::abort() {
  if (aborted_.exchange(true)) return;
  std::lock_guard lock(mutex_);  // the operation in progress, if any, sees aborted_ and returns
  ncclCommAbort(as_comm(comm_));
}

// A non-blocking communicator may answer ncclInProgress while it enqueues: poll until the
// call has settled (bounded), as NCCL asks before the next call on the communicator.
Status NcclGroup::check(int result, const char* what) {
  auto r = static_cast<ncclResult_t>(result);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (r == ncclInProgress && !aborted_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    ncclCommGetAsyncError(as_comm(comm_), &r);
  }
  if (r == ncclSuccess) return {};
  if (r == ncclInProgress)
    return make_error(fmt::format("NCCL {} on rank {} was still being enqueued after 60 s", what, rank_));
  return make_error(fmt::format("NCCL {} on rank {} failed: {}", what, rank_, ncclGetErrorString(r)));
}

#define TROUPE_NCCL_LIVE(what)                                                                            \
  std::lock_guard lock(mutex_);                                                                           \
  if (aborted_) return make_error(fmt::format("NCCL {} on rank {}: the group was aborted", what, rank_)); \
  cudaSetDevice(device_)

Status NcclGroup::all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, void* stream) {
  TROUPE_NCCL_LIVE("all-reduce");
  return check(ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), as_comm(comm_),
                             static_cast<cudaStream_t>(stream)),
               "all-reduce");
}

Status NcclGroup::reduce_scatter(const void* input, void* output, std::size_t count, DataType type,
                                 ReduceOp op, void* stream) {
  TROUPE_NCCL_LIVE("reduce-scatter");
  return check(ncclReduceScatter(input, output, count, nccl_type(type), nccl_op(op), as_comm(comm_),
                                 static_cast<cudaStream_t>(stream)),
               "reduce-scatter");
}

Status NcclGroup::all_gather(const void* input, void* output, std::size_t count, DataType type,
                             void* stream) {
  TROUPE_NCCL_LIVE("all-gather");
  return check(
      ncclAllGather(input, output, count, nccl_type(type), as_comm(comm_), static_cast<cudaStream_t>(stream)),
      "all-gather");
}

Status NcclGroup::broadcast(void* data, std::size_t count, DataType type, int root, void* stream) {
  TROUPE_NCCL_LIVE("broadcast");
  return check(ncclBroadcast(data, data, count, nccl_type(type), root, as_comm(comm_),
                             static_cast<cudaStream_t>(stream)),
               "broadcast");
}

#undef TROUPE_NCCL_LIVE

}  // namespace troupe
