#include "actors/zero/parameter_store.hpp"

#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <cstring>
#include <stdexcept>

#include "base/check.hpp"

namespace troupe {
namespace {

std::shared_ptr<HostBuffer> charged(std::size_t elements, DataType type,
                                    const std::shared_ptr<MemoryLedger>& ledger, MemoryKind kind) {
  return std::make_shared<HostBuffer>(elements * element_bytes(type), ledger, kind);
}

}  // namespace

torch::ScalarType scalar_type_of(DataType type) {
  switch (type) {
    case DataType::bf16:
      return torch::kBFloat16;
    case DataType::f16:
      return torch::kFloat16;
    default:
      return torch::kFloat32;
  }
}

torch::Tensor view_of(const std::shared_ptr<Buffer>& buffer, std::size_t offset, at::IntArrayRef sizes,
                      DataType type) {
  TROUPE_CHECK(buffer->placement().on_host(), "view_of sees host memory; a device's is StoreMemory::view's");
  return torch::from_blob(
      buffer->data() + offset * element_bytes(type), sizes, [keep = buffer](void*) {}, scalar_type_of(type));
}

ParameterStore::ParameterStore(ZeroPlan plan, std::vector<torch::Tensor> parameters, int64_t rank,
                               std::shared_ptr<MemoryLedger> ledger, std::shared_ptr<ParameterSwap> swap,
                               StoreMemory memory, DataType dtype, std::optional<DataType> reduce_type,
                               bool masters_on_host)
    : plan_(std::move(plan)),
      parameters_(std::move(parameters)),
      rank_(rank),
      ledger_(std::move(ledger)),
      swap_(std::move(swap)),
      memory_(memory),
      dtype_(dtype),
      reduce_type_(reduce_type.value_or(dtype)),
      masters_memory_(masters_on_host ? StoreMemory() : memory) {
  TROUPE_CHECK(!swap_ || policy().partitions_parameters(), "only partitioned parameters are swapped");
  TROUPE_CHECK(plan_.parameter_of.size() == parameters_.size(), "the plan covers every parameter once");
  for (const auto& p : parameters_) {
    TROUPE_CHECK(p.scalar_type() == torch::kFloat32, "the store takes the model's fp32 parameters");
    TROUPE_CHECK(p.device() == parameters_.front().device(), "every parameter is on one device");
  }
  TROUPE_CHECK(parameters_.empty() || parameters_.front().device() == memory_.device(),
               "the parameters are in the store's memory");
  TROUPE_CHECK(dtype_ == DataType::f32 || !swap_, "16-bit parameters are kept in memory");
  TROUPE_CHECK(!swap_ || !on_device(), "swapped rows are read into host memory");
  TROUPE_CHECK(reduce_type_ == dtype_ || reduce_type_ == DataType::f32,
               "gradients reduce in the dtype or fp32");
  if (dtype_ != DataType::f32) {  // before autograd's accumulators record each parameter's type
    keep_masters();
    to_dtype();
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    shapes_.push_back(parameter_at(i).sizes().vec());
    // Autograd records a parameter's shape in its gradient accumulator when that is
    // made: make it now, while every parameter still has its full shape.
    accumulators_.push_back(torch::autograd::impl::grad_accumulator(parameter_at(i)));
  }
  torch::NoGradGuard no_grad;
  switch (policy().parameter_home()) {
    case ParameterHome::model_tensors:
      own_tensors_ = MemoryCharge(ledger_, MemoryKind::parameters,
                                  static_cast<int64_t>(plan_.parameter_elements * element_size()),
                                  memory_.on_device() ? MemorySide::device : MemorySide::host);
      lay_out_gradients();
      break;
    case ParameterHome::flat:
      lay_out_flat(policy().keeps_flat_gradients());
      break;
    case ParameterHome::partition:
      keep_partition();
  }
  if (!policy().keeps_flat_gradients())
    partition_gradients_ = allocate(layout().partition_size(), reduce_type_, MemoryKind::gradients);
  if (policy().keeps_flat_gradients() && reduce_type_ != dtype_)
    reduced_gradients_ = allocate(layout().total(), reduce_type_, MemoryKind::gradients);
}

// Mixed precision: the fp32 values of this rank's shards, laid out as shards() lists them
// (whole parameters in model order, or row by row as the partition).
void ParameterStore::keep_masters() {
  if (policy().every_rank_updates_everything()) {
    std::size_t total = 0;
    for (const auto& p : parameters_) {
      master_offsets_.push_back(total);
      total += static_cast<std::size_t>(p.numel());
    }
    master_ = masters_memory_.allocate(total * sizeof(float), ledger_, MemoryKind::optimizer_state);
    for (std::size_t k = 0; k < parameters_.size(); ++k)
      copy_into(master_, master_offsets_[k], parameters_[k], DataType::f32);
    return;
  }
  for (std::size_t k = 0; k < layout().row_count(); ++k)
    master_offsets_.push_back(layout().row(k).partition_offset);
  master_ = masters_memory_.allocate(layout().partition_size() * sizeof(float), ledger_,
                                     MemoryKind::optimizer_state);
  for (const auto& piece : layout().pieces_in(rank_)) {
    auto flat = parameter_at(piece.parameter).detach().reshape({-1});
    copy_into(master_, piece.partition_offset,
              flat.narrow(0, static_cast<int64_t>(piece.parameter_offset), static_cast<int64_t>(piece.count)),
              DataType::f32);
  }
}

// Mixed precision: the model computes in dtype_ from here on.
void ParameterStore::to_dtype() {
  for (auto& p : parameters_) p.set_data(p.detach().to(scalar_type_of(dtype_)));
}

std::shared_ptr<Buffer> ParameterStore::allocate(std::size_t elements, DataType type, MemoryKind kind,
                                                 std::size_t align) const {
  return memory_.allocate(elements * element_bytes(type), ledger_, kind, align);
}

// p's values into `buffer` from `offset` (in values of `type`), converted to `type`.
void ParameterStore::copy_into(const std::shared_ptr<Buffer>& buffer, std::size_t offset,
                               const torch::Tensor& p, DataType type) const {
  view(buffer, offset, {p.numel()}, type).copy_(p.detach().reshape({-1}));
}

// Stage 0: the gradients are views into one flat buffer in the store's memory (on a GPU
// allocated by LibTorch on the current stream: the compute one).
void ParameterStore::lay_out_gradients() {
  flat_gradients_ = allocate(layout().total(), dtype_, MemoryKind::gradients);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor& p = parameter_at(i);
    p.mutable_grad() = view(flat_gradients_, layout().offset(i), p.sizes(), dtype_);
  }
}

// Stages 1-2: every parameter becomes a view into one flat buffer.
void ParameterStore::lay_out_flat(bool with_gradients) {
  flat_parameters_ = allocate(layout().total(), dtype_, MemoryKind::parameters);
  if (with_gradients) flat_gradients_ = allocate(layout().total(), dtype_, MemoryKind::gradients);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor& p = parameter_at(i);
    copy_into(flat_parameters_, layout().offset(i), p, dtype_);
    p.set_data(view(flat_parameters_, layout().offset(i), p.sizes(), dtype_));
    if (with_gradients) p.mutable_grad() = view(flat_gradients_, layout().offset(i), p.sizes(), dtype_);
  }
}

// Stage 3: keep this rank's pieces; persistent rows stay gathered (every rank holds
// the full parameters at this point, so they need no communication); the rest empty.
// With a swap the whole partition is put together once, the swapped rows' blocks go to
// NVMe, and the host keeps the rest (the persistent rows, which come first).
void ParameterStore::keep_partition() {
  rows_.resize(layout().row_count());
  auto whole = allocate(layout().partition_size(), dtype_, MemoryKind::parameters, NvmeStore::alignment);
  for (const auto& piece : layout().pieces_in(rank_)) {
    auto flat = parameter_at(piece.parameter).detach().reshape({-1});
    copy_into(whole, piece.partition_offset,
              flat.narrow(0, static_cast<int64_t>(piece.parameter_offset), static_cast<int64_t>(piece.count)),
              dtype_);
  }
  if (swap_) {
    if (Status written = write_swapped_rows(*whole); !written)
      throw std::runtime_error("[offload] param = \"nvme\": " + written.error().message);
    std::size_t kept = 0;
    for (std::size_t k = 0; k < layout().row_count(); ++k)
      if (!swapped(k)) {
        TROUPE_CHECK(layout().row(k).partition_offset == kept, "rows kept in memory come first");
        kept += layout().row(k).block;
      }
    partition_parameters_ = charged(kept, dtype_, ledger_, MemoryKind::parameters);  // swapping is host-only
    std::memcpy(partition_parameters_->data(), whole->data(), kept * element_size());
  } else {
    partition_parameters_ = std::move(whole);
  }
  for (std::size_t k = 0; k < layout().row_count(); ++k) {
    if (plan_.persistent_rows[k]) {
      auto buffer = make_row_buffer(k);
      const auto& row = layout().row(k);
      for (std::size_t i = row.first_parameter; i < row.first_parameter + row.parameter_count; ++i)
        copy_into(buffer, layout().offset(i) - row.begin, parameter_at(i), dtype_);
      bind_row(k, std::move(buffer));
    } else {
      unbind_row(k);
    }
  }
}

Status ParameterStore::write_swapped_rows(const Buffer& partition) {
  for (std::size_t k = 0; k < layout().row_count(); ++k)
    if (swapped(k))
      TROUPE_TRY(swap_->write_block(k, partition.as<float>() + layout().row(k).partition_offset));
  return {};
}

std::shared_ptr<Buffer> ParameterStore::make_row_buffer(std::size_t k) const {
  return allocate(layout().row_elements(k), dtype_, MemoryKind::parameters,
                  swapped(k) ? NvmeStore::alignment : HostBuffer::alignment);
}

void ParameterStore::bind_row(std::size_t k, std::shared_ptr<Buffer> buffer) {
  const auto& row = layout().row(k);
  for (std::size_t i = row.first_parameter; i < row.first_parameter + row.parameter_count; ++i) {
    torch::Tensor& p = parameter_at(i);
    p.set_data(view(buffer, layout().offset(i) - row.begin, shapes_[i], dtype_));
  }
  rows_[k] = std::move(buffer);
}

void ParameterStore::unbind_row(std::size_t k) {
  const auto& row = layout().row(k);
  for (std::size_t i = row.first_parameter; i < row.first_parameter + row.parameter_count; ++i) {
    torch::Tensor& p = parameter_at(i);
    p.set_data(torch::empty({0}, torch::TensorOptions(scalar_type_of(dtype_)).device(memory_.device())));
  }
  rows_[k].reset();
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> ParameterStore::shards() const {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  if (policy().every_rank_updates_everything()) {
    std::vector<std::size_t> position_of(parameters_.size());  // by model index: its layout position
    for (std::size_t position = 0; position < plan_.parameter_of.size(); ++position)
      position_of[plan_.parameter_of[position]] = position;
    for (std::size_t k = 0; k < parameters_.size(); ++k) {
      const torch::Tensor& p = parameters_[k];
      out.emplace_back(p, reduced_gradients_ ? view(reduced_gradients_, layout().offset(position_of[k]),
                                                    p.sizes(), reduce_type_)
                                             : p.grad());
    }
    return out;
  }
  for (std::size_t k = 0; k < layout().row_count(); ++k) {
    const auto& row = layout().row(k);
    auto block = static_cast<int64_t>(row.block);
    std::size_t flat = layout().block_begin(k, rank_);
    torch::Tensor param = !policy().partitions_parameters() ? view(flat_parameters_, flat, {block}, dtype_)
                          : swapped(k)                      ? torch::Tensor()
                                       : view(partition_parameters_, row.partition_offset, {block}, dtype_);
    torch::Tensor grad = !policy().keeps_flat_gradients()
                             ? view(partition_gradients_, row.partition_offset, {block}, reduce_type_)
                         : reduced_gradients_ ? view(reduced_gradients_, flat, {block}, reduce_type_)
                                              : view(flat_gradients_, flat, {block}, dtype_);
    out.emplace_back(param, grad);
  }
  return out;
}

std::vector<std::vector<ParameterRun>> ParameterStore::shard_runs() const {
  std::vector<std::vector<ParameterRun>> runs;
  if (policy().every_rank_updates_everything()) {  // shards() in model order, one whole parameter each
    runs.resize(parameters_.size());
    for (std::size_t position = 0; position < parameters_.size(); ++position) {
      std::size_t model_index = plan_.parameter_of[position];
      runs[model_index].push_back(ParameterRun{0, layout().count(position), position});
    }
    return runs;
  }
  runs.resize(layout().row_count());
  for (const auto& piece : layout().pieces_in(rank_)) {
    std::size_t k = layout().row_of_parameter(piece.parameter);
    runs[k].push_back(ParameterRun{piece.partition_offset - layout().row(k).partition_offset, piece.count,
                                   piece.parameter});
  }
  return runs;
}

torch::Tensor ParameterStore::flatten() const {
  std::vector<torch::Tensor> pieces;
  for (const auto& p : parameters_) pieces.push_back(p.detach().reshape({-1}).to(torch::kFloat32).clone());
  return pieces.empty() ? torch::empty({0}) : torch::cat(pieces);
}

}  // namespace troupe
