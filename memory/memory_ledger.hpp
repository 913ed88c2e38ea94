// MemoryLedger: the bytes one rank holds, by kind, as they are allocated and freed,
// with the peak of each kind since the last reset; of them, apart, what is in the
// device's memory (a GPU rank's, or the device path's stand-in), so a run reports its
// device bytes beside the total. Buffers charge it for as long as
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

/// Where charged bytes are: host memory, or the device's.
enum class MemorySide { host, device };

class MemoryLedger {
 public:
  void add(MemoryKind kind, int64_t bytes, MemorySide side = MemorySide::host);
  /// For memory measured rather than charged: the kind now holds `bytes`.
  void set(MemoryKind kind, int64_t bytes, MemorySide side = MemorySide::host);
  /// Both sides together.
  MemoryBytes current() const;
  MemoryBytes peak() const;
  /// What of them is in the device's memory.
  MemoryBytes device_current() const;
  MemoryBytes device_peak() const;
  /// Peaks start again from what is held now.
  void reset_peaks();

 private:
  using Counts = std::array<std::atomic<int64_t>, memory_kind_count>;
  Counts current_{}, peak_{};                // both sides
  Counts device_current_{}, device_peak_{};  // the device's share
  Counts host_set_{}, device_set_{};         // what set() last put on each side
};

/// Holds `bytes` of `kind` charged to a ledger until destroyed. Move-only.
class MemoryCharge {
 public:
  MemoryCharge() = default;
  MemoryCharge(std::shared_ptr<MemoryLedger> ledger, MemoryKind kind, int64_t bytes,
               MemorySide side = MemorySide::host);
  ~MemoryCharge();
  MemoryCharge(MemoryCharge&& other) noexcept;
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;

 private:
  void release();
  std::shared_ptr<MemoryLedger> ledger_;
  MemoryKind kind_ = MemoryKind::parameters;
  MemorySide side_ = MemorySide::host;
  int64_t bytes_ = 0;
};

}  // namespace troupe
