#include "runtime/model/tensor_parallel_group.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe {

TensorParallelGroup::TensorParallelGroup(int64_t size, int64_t index, bool sequence_parallel)
    : size_(size), index_(index), sequence_parallel_(sequence_parallel) {}

namespace {
// The calling thread's own communicator, for one group: a thread computes one chunk.
thread_local const TensorParallelGroup* thread_group = nullptr;
thread_local TensorParallelComm* thread_comm = nullptr;
}  // namespace

TensorParallelComm* TensorParallelGroup::current_comm() const {
  if (thread_group == this && thread_comm) return thread_comm;
  return comm_.get();
}

void TensorParallelGroup::use_on_this_thread(std::shared_ptr<TensorParallelComm> comm) {
  thread_group = this;
  thread_comm = comm.get();
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  lanes_.push_back(std::move(comm));
}

TensorParallelGroup::OnThread::OnThread(const TensorParallelGroup* group, TensorParallelComm* comm)
    : group_(thread_group), comm_(thread_comm) {
  if (!comm) return;
  thread_group = group;
  thread_comm = comm;
}

TensorParallelGroup::OnThread::~OnThread() {
  thread_group = group_;
  thread_comm = comm_;
}

TensorParallelComm& TensorParallelGroup::comm() const {
  if (TensorParallelComm* mine = current_comm()) return *mine;
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
