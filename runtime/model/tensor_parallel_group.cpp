#include "runtime/model/tensor_parallel_group.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe {

TensorParallelGroup::TensorParallelGroup(int64_t size, int64_t index, bool sequence_parallel)
    : size_(size), index_(index), sequence_parallel_(sequence_parallel) {}

TensorParallelComm& TensorParallelGroup::comm() const {
  if (!comm_)
    throw std::runtime_error(fmt::format(
        "tensor-parallel layer (rank {} of a group of {}) ran before the engine bound its group: give the "
        "group to Engine::make in Trainable::tensor_parallel",
        index_, size_));
  return *comm_;
}

TensorSplit TensorParallelGroup::split_of(const void* parameter) const {
  auto found = splits_.find(parameter);
  return found == splits_.end() ? TensorSplit{} : found->second;
}

}  // namespace troupe
