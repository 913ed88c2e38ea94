#include "actors/zero/parameter_store.hpp"

#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <cstring>
#include <stdexcept>

#include "base/check.hpp"

namespace troupe {
namespace {

constexpr int64_t kFloatBytes = sizeof(float);

std::shared_ptr<HostBuffer> charged(std::size_t elements, const std::shared_ptr<MemoryLedger>& ledger,
                                    MemoryKind kind) {
  return std::make_shared<HostBuffer>(elements * sizeof(float), ledger, kind);
}

void copy_into(const std::shared_ptr<HostBuffer>& buffer, std::size_t offset, const torch::Tensor& p) {
  auto values = p.detach().contiguous();
  std::memcpy(buffer->as<float>() + offset, values.data_ptr<float>(), values.numel() * sizeof(float));
}

}  // namespace

torch::Tensor view_of(const std::shared_ptr<HostBuffer>& buffer, std::size_t offset, at::IntArrayRef sizes) {
  return torch::from_blob(
      buffer->as<float>() + offset, sizes, [keep = buffer](void*) {}, torch::kFloat32);
}

ParameterStore::ParameterStore(ZeroPlan plan, std::vector<torch::Tensor> parameters, int64_t rank,
                               std::shared_ptr<MemoryLedger> ledger, std::shared_ptr<ParameterSwap> swap,
                               bool device_resident)
    : plan_(std::move(plan)),
      parameters_(std::move(parameters)),
      rank_(rank),
      ledger_(std::move(ledger)),
      swap_(std::move(swap)),
      device_resident_(device_resident) {
  TROUPE_CHECK(!swap_ || plan_.stage == 3, "only stage 3 swaps parameters");
  TROUPE_CHECK(plan_.parameter_of.size() == parameters_.size(), "the plan covers every parameter once");
  for (const auto& p : parameters_) {
    TROUPE_CHECK(p.scalar_type() == torch::kFloat32, "ZeRO partitions fp32 parameters");
    TROUPE_CHECK(p.device() == parameters_.front().device(), "every parameter is on one device");
  }
  TROUPE_CHECK(!on_device() || plan_.stage == 0, "only stage 0 keeps its parameters on a GPU");
  TROUPE_CHECK(on_device() || parameters_.empty() || parameters_.front().device().is_cpu(),
               "parameters on a GPU need a device-resident store");
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    shapes_.push_back(parameter_at(i).sizes().vec());
    // Autograd records a parameter's shape in its gradient accumulator when that is
    // made: make it now, while every parameter still has its full shape.
    accumulators_.push_back(torch::autograd::impl::grad_accumulator(parameter_at(i)));
  }
  torch::NoGradGuard no_grad;
  switch (plan_.stage) {
    case 0:
      own_tensors_ = MemoryCharge(ledger_, MemoryKind::parameters,
                                  static_cast<int64_t>(plan_.parameter_elements) * kFloatBytes);
      if (on_device()) {
        lay_out_device_gradients();
        break;
      }
      flat_gradients_ = charged(layout().total(), ledger_, MemoryKind::gradients);
      for (std::size_t i = 0; i < parameters_.size(); ++i) {
        torch::Tensor& p = parameter_at(i);
        p.mutable_grad() = view_of(flat_gradients_, layout().offset(i), p.sizes());
      }
      break;
    case 1:
    case 2:
      lay_out_flat(plan_.stage == 1);
      break;
    default:
      keep_partition();
  }
  if (plan_.stage >= 2)
    partition_gradients_ = charged(layout().partition_size(), ledger_, MemoryKind::gradients);
}

// Stage 0 on a GPU: the gradients are views into one flat device tensor, allocated on
// the parameters' device (LibTorch's allocator, on the current stream: the compute one).
void ParameterStore::lay_out_device_gradients() {
  device_gradients_ = torch::zeros({static_cast<int64_t>(layout().total())}, parameters_.front().options());
  device_gradient_charge_ =
      MemoryCharge(ledger_, MemoryKind::gradients, static_cast<int64_t>(layout().total()) * kFloatBytes);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor& p = parameter_at(i);
    p.mutable_grad() =
        device_gradients_.narrow(0, static_cast<int64_t>(layout().offset(i)), p.numel()).view(p.sizes());
  }
}

// Stages 1-2: every parameter becomes a view into one flat buffer.
void ParameterStore::lay_out_flat(bool with_gradients) {
  flat_parameters_ = charged(layout().total(), ledger_, MemoryKind::parameters);
  if (with_gradients) flat_gradients_ = charged(layout().total(), ledger_, MemoryKind::gradients);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor& p = parameter_at(i);
    copy_into(flat_parameters_, layout().offset(i), p);
    p.set_data(view_of(flat_parameters_, layout().offset(i), p.sizes()));
    if (with_gradients) p.mutable_grad() = view_of(flat_gradients_, layout().offset(i), p.sizes());
  }
}

// Stage 3: keep this rank's pieces; persistent rows stay gathered (every rank holds
// the full parameters at this point, so they need no communication); the rest empty.
// With a swap the whole partition is put together once, the swapped rows' blocks go to
// NVMe, and the host keeps the rest (the persistent rows, which come first).
void ParameterStore::keep_partition() {
  rows_.resize(layout().row_count());
  auto whole = std::make_shared<HostBuffer>(layout().partition_size() * sizeof(float), ledger_,
                                            MemoryKind::parameters, NvmeStore::alignment);
  for (const auto& piece : layout().pieces_in(rank_)) {
    auto flat = parameter_at(piece.parameter).detach().reshape({-1});
    auto slice =
        flat.narrow(0, static_cast<int64_t>(piece.parameter_offset), static_cast<int64_t>(piece.count));
    std::memcpy(whole->as<float>() + piece.partition_offset, slice.contiguous().data_ptr<float>(),
                piece.count * sizeof(float));
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
    partition_parameters_ = charged(kept, ledger_, MemoryKind::parameters);
    std::memcpy(partition_parameters_->data(), whole->data(), kept * sizeof(float));
  } else {
    partition_parameters_ = std::move(whole);
  }
  for (std::size_t k = 0; k < layout().row_count(); ++k) {
    if (plan_.persistent_rows[k]) {
      auto buffer = make_row_buffer(k);
      const auto& row = layout().row(k);
      for (std::size_t i = row.first_parameter; i < row.first_parameter + row.parameter_count; ++i)
        copy_into(buffer, layout().offset(i) - row.begin, parameter_at(i));
      bind_row(k, std::move(buffer));
    } else {
      unbind_row(k);
    }
  }
}

Status ParameterStore::write_swapped_rows(const HostBuffer& partition) {
  for (std::size_t k = 0; k < layout().row_count(); ++k)
    if (swapped(k))
      TROUPE_TRY(swap_->write_block(k, partition.as<float>() + layout().row(k).partition_offset));
  return {};
}

std::shared_ptr<HostBuffer> ParameterStore::make_row_buffer(std::size_t k) const {
  return std::make_shared<HostBuffer>(layout().row_elements(k) * sizeof(float), ledger_,
                                      MemoryKind::parameters,
                                      swapped(k) ? NvmeStore::alignment : HostBuffer::alignment);
}

void ParameterStore::bind_row(std::size_t k, std::shared_ptr<HostBuffer> buffer) {
  const auto& row = layout().row(k);
  for (std::size_t i = row.first_parameter; i < row.first_parameter + row.parameter_count; ++i) {
    torch::Tensor& p = parameter_at(i);
    p.set_data(view_of(buffer, layout().offset(i) - row.begin, shapes_[i]));
  }
  rows_[k] = std::move(buffer);
}

void ParameterStore::unbind_row(std::size_t k) {
  const auto& row = layout().row(k);
  for (std::size_t i = row.first_parameter; i < row.first_parameter + row.parameter_count; ++i) {
    torch::Tensor& p = parameter_at(i);
    p.set_data(torch::empty({0}, torch::kFloat32));
  }
  rows_[k].reset();
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> ParameterStore::shards() const {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  if (plan_.stage == 0) {
    for (const auto& p : parameters_) out.emplace_back(p, p.grad());
    return out;
  }
  for (std::size_t k = 0; k < layout().row_count(); ++k) {
    const auto& row = layout().row(k);
    auto block = static_cast<int64_t>(row.block);
    std::size_t flat = layout().block_begin(k, rank_);
    torch::Tensor param = plan_.stage != 3 ? view_of(flat_parameters_, flat, {block})
                          : swapped(k)     ? torch::Tensor()
                                           : view_of(partition_parameters_, row.partition_offset, {block});
    torch::Tensor grad = plan_.stage == 1 ? view_of(flat_gradients_, flat, {block})
                                          : view_of(partition_gradients_, row.partition_offset, {block});
    out.emplace_back(param, grad);
  }
  return out;
}

std::vector<std::vector<ParameterRun>> ParameterStore::shard_runs() const {
  std::vector<std::vector<ParameterRun>> runs;
  if (plan_.stage == 0) {  // shards() in model order, one whole parameter each
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
  for (const auto& p : parameters_) pieces.push_back(p.detach().reshape({-1}).clone());
  return pieces.empty() ? torch::empty({0}) : torch::cat(pieces);
}

}  // namespace troupe
