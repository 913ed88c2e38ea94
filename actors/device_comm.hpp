// The device comm actor: the one issuer of a GPU rank's NCCL collectives (NCCL needs one
// thread per communicator and the same order on every rank). Requests are issued in the
// order they arrive — the stage issues them through its IssueQueue, in program order — on
// the rank's comm stream, each after the events of its spans' writers (BufferSpan::ready),
// waited for on the device; completion
// comes back as collective_done through a host callback of the comm stream, so no thread
// ever blocks on the GPU. A failed launch answers with the error; the actor goes on.
// Protocol: the comm agent's requests (actors/protocol/comm.hpp) over spans in device
// memory, on any communicator the rank has an NCCL group for (the world, a pipeline
// stage's data-parallel group, a tied weight's stages); one over host memory is passed on
// to the comm agent (whose UCX sequence is NCCL's apart); anything else is answered with an
// error saying why. The groups share the comm stream, so their calls run in the order issued.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <map>
#include <memory>

#include "actors/cuda_stream.hpp"
#include "transport/nccl_group.hpp"

namespace troupe {

/// NCCL's group of each communicator this rank is in (the world's among them).
using NcclGroups = std::map<CommunicatorId, std::unique_ptr<NcclGroup>>;

/// The actor owns `groups` and `stream` (the rank's comm stream).
caf::actor spawn_device_comm(caf::actor_system& system, caf::actor comm_agent, NcclGroups groups,
                             std::unique_ptr<CudaStream> stream);

/// One group, the world's.
caf::actor spawn_device_comm(caf::actor_system& system, caf::actor comm_agent,
                             std::unique_ptr<NcclGroup> group, std::unique_ptr<CudaStream> stream);

}  // namespace troupe
