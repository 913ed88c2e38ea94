// A tensor-parallel group's collectives over the rank's transport: one communicator of the
// group's ranks, fp32 sums, each wait bounded by the cluster's collective timeout (the
// transport fails a collective past it; the extra margin only catches a transport that
// never answered at all).
// Thread safety: as Transport's; the compute stream calls it.
#pragma once

#include <memory>
#include <string>

#include "runtime/model/tensor_parallel_group.hpp"
#include "transport/transport.hpp"

namespace troupe {

/// `name` says which group in errors ("the tensor-parallel group of ranks 0-1").
std::shared_ptr<TensorParallelComm> make_transport_tensor_comm(std::weak_ptr<Transport> transport,
                                                               CommunicatorId comm, double timeout_s,
                                                               std::string name);

}  // namespace troupe
