#include "actors/zero/store_memory.hpp"

#include <torch/torch.h>

#include <cstring>

#include "actors/zero/parameter_store.hpp"
#include "base/check.hpp"

namespace troupe {
namespace {

// A device block: the tensor that owns the bytes and the ledger's charge for them.
struct DeviceBlock {
  torch::Tensor tensor;
  MemoryCharge charge;
};

}  // namespace

StoreMemory::StoreMemory(Placement placement, torch::Device device)
    : placement_(placement), device_(device) {}

std::shared_ptr<Buffer> StoreMemory::allocate(std::size_t bytes, const std::shared_ptr<MemoryLedger>& ledger,
                                              MemoryKind kind, std::size_t align) const {
  if (!on_device()) return std::make_shared<HostBuffer>(bytes, ledger, kind, align);
  auto block = std::make_shared<DeviceBlock>();
  // LibTorch's allocator hands out blocks aligned for any of its kernels (512 bytes on a GPU).
  block->tensor =
      torch::zeros({static_cast<int64_t>(bytes)}, torch::TensorOptions(torch::kUInt8).device(device_));
  block->charge = MemoryCharge(ledger, kind, static_cast<int64_t>(bytes), MemorySide::device);
  void* data = block->tensor.data_ptr();
  return std::make_shared<ViewBuffer>(data, bytes, placement_, std::move(block));
}

torch::Tensor StoreMemory::view(const std::shared_ptr<Buffer>& buffer, std::size_t offset,
                                at::IntArrayRef sizes, DataType type) const {
  const bool host = buffer->placement().on_host();
  TROUPE_CHECK(host || buffer->placement() == placement_,
               "a device buffer is viewed with its device's memory");
  return torch::from_blob(
      buffer->data() + offset * element_bytes(type), sizes, [keep = buffer](void*) {},
      torch::TensorOptions(scalar_type_of(type)).device(host ? torch::Device(torch::kCPU) : device_));
}

void StoreMemory::zero(Buffer& buffer, std::size_t bytes) const {
  if (buffer.placement().on_host()) {
    std::memset(buffer.data(), 0, bytes);
    return;
  }
  torch::from_blob(buffer.data(), {static_cast<int64_t>(bytes)},
                   torch::TensorOptions(torch::kUInt8).device(device_))
      .zero_();
}

}  // namespace troupe
