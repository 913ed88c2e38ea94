// The staged comm actor: a GPU rank's collectives where NCCL cannot run — several ranks on
// one GPU, which NCCL refuses — staged through host memory: each request's input is
// copied to a host buffer on the d2h stream, reduced across ranks by the comm agent over
// UCX, and the result copied back on the h2d stream. Same protocol as the device comm
// actor and the comm agent (actors/protocol/comm.hpp), so a stage can use either; the
// copy out waits on the d2h stream for the spans' writers (BufferSpan::ready). A request
// may name any communicator the transport made (a pipeline stage's data-parallel group,
// the stages of a tied weight): its blocks are laid out by this rank's position in it.
//
// Order: requests arrive in program order (the stage's IssueQueue); each goes to the comm
// agent when its copy out has run, and copies complete in stream order, so the host
// collectives keep that order on every rank. A request on host memory (a ZeRO-3 layer
// check among the gathers) needs no copy but takes its place in the same line, so it
// reaches the comm agent after the requests before it on every rank. The staging buffer and the request's
// spans are let go, on this actor's thread, before the requester hears collective_done; the
// staging buffers (pinned when the options can) wait for the next request of their size.
//
// It works on any Stream: with CudaStreams it moves device memory through pinned host
// buffers; with CpuStreams it moves host memory, which is how it is tested without a GPU.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <functional>
#include <memory>

#include "actors/stream.hpp"
#include "base/result.hpp"
#include "memory/memory_ledger.hpp"
#include "transport/transport.hpp"

namespace troupe {

/// This rank's position in a communicator and how many ranks it has.
struct CommunicatorPlace {
  int64_t position = -1;  ///< -1: not a member (or no such communicator)
  int64_t size = 0;
};
using CommunicatorPlaces = std::function<CommunicatorPlace(CommunicatorId)>;

struct StagedCommOptions {
  caf::actor comm_agent;
  std::shared_ptr<Stream> d2h;           ///< copies out of the device
  std::shared_ptr<Stream> h2d;           ///< copies back
  CommunicatorPlaces places;             ///< where this rank is in each communicator (the transport's)
  std::shared_ptr<MemoryLedger> ledger;  ///< optional: staging buffers charged as communication
  /// Optional: page-locks a staging buffer (cudaHostRegister) so the copies run
  /// asynchronously; null on host streams.
  std::function<Result<std::shared_ptr<void>>(void* data, std::size_t bytes)> pin;
};

caf::actor spawn_staged_comm(caf::actor_system& system, StagedCommOptions options);

/// The places of every communicator `transport` made, asked as requests come (a
/// transport gone answers "not a member").
CommunicatorPlaces communicator_places(std::weak_ptr<const Transport> transport);

/// Rank `rank` of `world` on the world communicator alone (tests without a transport).
CommunicatorPlaces world_place(int64_t rank, int64_t world);

}  // namespace troupe
