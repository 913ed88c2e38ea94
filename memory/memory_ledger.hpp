// MemoryLedger: the bytes one rank holds, by kind, as they are allocated and freed,
// with the peak of each kind since the last reset. Buffers charge it for as long as
// they live (MemoryCharge); memory another library allocates (LibTorch's optimizer
// state) is set by whoever can measure it.
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace troupe {

/// activations: what a pipeline stage keeps of a micro-batch between its forward and its
/// backward that troupe holds itself (the stage's input and output tensors; the tensors
/// autograd saves inside the layers are LibTorch's and not counted).
enum class MemoryKind { parameters, gradients, optimizer_state, communication, activations };
constexpr std::size_t memory_kind_count = 5;
std::string_view memory_kind_name(MemoryKind kind);

/// Bytes per kind, at one moment or at their peaks.
struct MemoryBytes {
  std::array<int64_t, memory_kind_count> bytes{};
  int64_t& operator[](MemoryKind k) { return bytes[static_cast<std::size_t>(k)]; }
  int64_t operator[](MemoryKind k) const { return bytes[static_cast<std::size_t>(k)]; }
  /// Parameters, gradients and optimizer state: ZeRO's "model states".
  int64_t model_state() const {
    return (*this)[MemoryKind::parameters] + (*this)[MemoryKind::gradients] +
           (*this)[MemoryKind::optimizer_state];
  }
};

class MemoryLedger {
 public:
  void add(MemoryKind kind, int64_t bytes);
  /// For memory measured rather than charged: the kind now holds `bytes`.
  void set(MemoryKind kind, int64_t bytes);
  MemoryBytes current() const;
  MemoryBytes peak() const;
  /// Peaks start again from what is held now.
  void reset_peaks();

 private:
  std::array<std::atomic<int64_t>, memory_kind_count> current_{};
  std::array<std::atomic<int64_t>, memory_kind_count> peak_{};
};

/// Holds `bytes` of `kind` charged to a ledger until destroyed. Move-only.
class MemoryCharge {
 public:
  MemoryCharge() = default;
  MemoryCharge(std::shared_ptr<MemoryLedger> ledger, MemoryKind kind, int64_t bytes);
  ~MemoryCharge();
  MemoryCharge(MemoryCharge&& other) noexcept;
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;

 private:
  void release();
  std::shared_ptr<MemoryLedger> ledger_;
  MemoryKind kind_ = MemoryKind::parameters;
  int64_t bytes_ = 0;
};

}  // namespace troupe
