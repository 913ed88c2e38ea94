// ParameterStore: where one stage's parameters and gradients live under its ZeRO
// stage, following a ZeroPlan.
//
//   stage 0: the model's own parameter tensors; gradients are views into one flat
//            buffer (all-reduced row by row).
//   stage 1: parameters and gradients are views into two flat buffers; this rank
//            updates its blocks, then every row is all-gathered in place.
//   stage 2: parameters as in stage 1; gradients arrive one by one from autograd, go
//            through bucket buffers and only this rank's partition is kept.
//   stage 3: only this rank's partition of the parameters is held; a row is gathered
//            into a buffer of its own before use (bind_row) and dropped after
//            (unbind_row), which leaves its parameters empty. With a ParameterSwap
//            ([offload] param = "nvme") the blocks of the rows that are not persistent
//            live on NVMe: the host partition holds the persistent rows only.
// Every buffer is in the store's memory (StoreMemory): the host's, or on a GPU rank the
// device's, where the model's parameters already are; the collectives that move a buffer
// follow its placement. Swapped rows are host-only so far. The fp32 masters of mixed
// precision are where the optimizer runs (`masters_on_host`: an offload tier's kernels).
// Mixed precision (`dtype` bf16 or fp16): every buffer above holds 16-bit values, the
// model's parameters become 16-bit tensors, and the store keeps the fp32 master values of
// this rank's shards (as shards() lists them) for the shard owner, which updates them and
// writes the 16-bit copy back into the shards in the same pass. The gradients may be
// reduced in fp32 instead (`reduce_type`, DeepSpeed's communication_data_type): stages 0-1
// then widen each row into reduced_gradients() before it is reduced, and stages 2-3 keep
// their bucket slots and partition in fp32; the shards' gradients are those fp32 values.
// Views that autograd saves keep their buffer alive (the tensors own a reference), so
// a row freed while a saved view still points into it is freed when the view dies.
// Thread safety: owned by the stage's compute thread; the shard owner uses the shard
// views and the buffers between steps, when compute is idle.
#pragma once

#include <torch/csrc/autograd/variable.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "actors/zero/store_memory.hpp"
#include "kernels/cpu/reduce.hpp"
#include "memory/host_buffer.hpp"
#include "memory/memory_ledger.hpp"
#include "memory/parameter_runs.hpp"
#include "memory/parameter_swap.hpp"
#include "memory/zero_plan.hpp"

namespace troupe {

/// A leaf's gradient accumulator as LibTorch hands it out (an intrusive_ptr in LibTorch
/// 2.15, a shared_ptr in 2.11).
using GradAccumulator =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));

class ParameterStore {
 public:
  /// `parameters` in model order, equal on every rank; their values are moved in (stage 3
  /// with `swap`: this rank's blocks of the swapped rows are written to NVMe).
  /// `memory`: where its buffers go (a GPU rank: the device the parameters are on). `dtype`:
  /// what the model computes in (the fp32 `parameters` are converted; their fp32 values
  /// become the master copy).
  ParameterStore(ZeroPlan plan, std::vector<torch::Tensor> parameters, int64_t rank,
                 std::shared_ptr<MemoryLedger> ledger, std::shared_ptr<ParameterSwap> swap = nullptr,
                 StoreMemory memory = {}, DataType dtype = DataType::f32,
                 std::optional<DataType> reduce_type = std::nullopt, bool masters_on_host = true);
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  const ZeroPlan& plan() const { return plan_; }
  const FlatLayout& layout() const { return plan_.layout; }
  /// What this ZeRO stage partitions: the one decision every user of the store reads.
  const ZeroPolicy& policy() const { return plan_.policy; }
  int64_t rank() const { return rank_; }
  /// The element type of the parameters, gradients and every buffer of the store.
  DataType dtype() const { return dtype_; }
  std::size_t element_size() const { return element_bytes(dtype_); }
  /// The type gradients are reduced in and handed to the optimizer (the dtype, or fp32).
  DataType reduce_type() const { return reduce_type_; }
  /// Stages 0-1 reducing in fp32 what autograd accumulates in 16 bits (else null): each
  /// row is widened here, at its flat offsets, then reduced in place.
  const std::shared_ptr<Buffer>& reduced_gradients() const { return reduced_gradients_; }
  /// Mixed precision (else null): the fp32 master values of the shards, shard k at
  /// master_offsets()[k], charged as optimizer state (ZeRO counts them so); in host memory,
  /// or the device's when the optimizer runs there.
  const std::shared_ptr<Buffer>& master_parameters() const { return master_; }
  /// Shard k's master values (mixed precision), as a tensor where they are.
  torch::Tensor master_of(std::size_t k, int64_t count) const {
    return view(master_, master_offsets_[k], {count}, DataType::f32);
  }
  const std::vector<std::size_t>& master_offsets() const { return master_offsets_; }
  const std::shared_ptr<MemoryLedger>& ledger() const { return ledger_; }

  /// The model parameter at layout position `position`.
  torch::Tensor& parameter_at(std::size_t position) { return parameters_[plan_.parameter_of[position]]; }

  /// Where the buffers below are, and how to view and zero them.
  const StoreMemory& memory() const { return memory_; }
  /// A GPU rank's store: parameters and gradients in device memory.
  bool on_device() const { return memory_.on_device(); }
  /// A tensor over `buffer` (one of the store's, or the host's) as memory().view makes it.
  torch::Tensor view(const std::shared_ptr<Buffer>& buffer, std::size_t offset, at::IntArrayRef sizes,
                     DataType type) const {
    return memory_.view(buffer, offset, sizes, type);
  }

  const std::shared_ptr<Buffer>& flat_parameters() const { return flat_parameters_; }  ///< stages 1-2
  const std::shared_ptr<Buffer>& flat_gradients() const { return flat_gradients_; }    ///< stages 0-1
  const std::shared_ptr<Buffer>& partition_parameters() const { return partition_parameters_; }  ///< stage 3
  /// Stage 3 with parameters on NVMe (else null): where the rows it swaps live.
  const std::shared_ptr<ParameterSwap>& swap() const { return swap_; }
  bool swapped(std::size_t row) const { return swap_ && swap_->on_nvme(row); }
  const std::shared_ptr<Buffer>& partition_gradients() const { return partition_gradients_; }  ///< stages 2-3

  /// Stage 3: row `k`'s parameters become views into `buffer` (the gathered row), or empty.
  void bind_row(std::size_t k, std::shared_ptr<Buffer> buffer);
  void unbind_row(std::size_t k);
  const std::shared_ptr<Buffer>& row_buffer(std::size_t k) const { return rows_[k]; }
  /// Stage 3: a buffer for gathering row `k` into, charged as parameters (page aligned
  /// when the row is swapped, so this rank's block can be read into it).
  std::shared_ptr<Buffer> make_row_buffer(std::size_t k) const;

  /// This rank's (parameter, gradient) pairs the optimizer updates: whole parameters in
  /// stage 0, this rank's block of every row otherwise (by row; the parameter is
  /// undefined for a swapped row).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> shards() const;
  /// By shard (as shards()): the pieces of parameters it holds, by layout position.
  std::vector<std::vector<ParameterRun>> shard_runs() const;

  /// Every parameter in model order, flattened (stage 3: all rows must be bound).
  torch::Tensor flatten() const;

 private:
  void lay_out_flat(bool with_gradients);
  void lay_out_gradients();
  std::shared_ptr<Buffer> allocate(std::size_t elements, DataType type, MemoryKind kind,
                                   std::size_t align = HostBuffer::alignment) const;
  void copy_into(const std::shared_ptr<Buffer>& buffer, std::size_t offset, const torch::Tensor& p,
                 DataType type) const;
  void keep_partition();
  void keep_masters();
  void to_dtype();
  Status write_swapped_rows(const Buffer& partition);

  ZeroPlan plan_;
  std::vector<torch::Tensor> parameters_;
  int64_t rank_ = 0;
  std::shared_ptr<MemoryLedger> ledger_;
  std::shared_ptr<ParameterSwap> swap_;
  StoreMemory memory_;
  DataType dtype_ = DataType::f32;
  DataType reduce_type_ = DataType::f32;
  StoreMemory masters_memory_;
  std::shared_ptr<Buffer> reduced_gradients_;
  std::shared_ptr<Buffer> master_;
  std::vector<std::size_t> master_offsets_;
  MemoryCharge own_tensors_;  // stage 0: the model's own parameter storage
  std::shared_ptr<Buffer> flat_parameters_, flat_gradients_, partition_parameters_, partition_gradients_;
  std::vector<std::vector<int64_t>> shapes_;   // by layout position
  std::vector<GradAccumulator> accumulators_;  // autograd holds them weakly
  std::vector<std::shared_ptr<Buffer>> rows_;  // stage 3: gathered rows, by row
};

/// A tensor of `sizes` viewing values of `type` from `offset` (in values) into `buffer`
/// in host memory, which it keeps alive.
torch::Tensor view_of(const std::shared_ptr<Buffer>& buffer, std::size_t offset, at::IntArrayRef sizes,
                      DataType type = DataType::f32);
/// LibTorch's scalar type for `type`.
torch::ScalarType scalar_type_of(DataType type);

}  // namespace troupe
