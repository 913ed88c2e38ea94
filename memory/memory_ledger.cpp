#include "memory/memory_ledger.hpp"

#include <utility>

namespace troupe {
namespace {

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

MemoryBytes load(const std::array<std::atomic<int64_t>, memory_kind_count>& counts) {
  MemoryBytes out;
  for (std::size_t k = 0; k < memory_kind_count; ++k) out.bytes[k] = counts[k].load();
  return out;
}

}  // namespace

std::string_view memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::parameters:
      return "parameters";
    case MemoryKind::gradients:
      return "gradients";
    case MemoryKind::optimizer_state:
      return "optimizer_state";
    case MemoryKind::communication:
      return "communication";
    case MemoryKind::activations:
      return "activations";
  }
  return "?";
}

void MemoryLedger::add(MemoryKind kind, int64_t bytes, MemorySide side) {
  auto k = static_cast<std::size_t>(kind);
  raise_peak(peak_[k], current_[k] += bytes);
  if (side == MemorySide::device) raise_peak(device_peak_[k], device_current_[k] += bytes);
}

// A measured figure replaces what the last set() of its side said, so charges stay counted.
void MemoryLedger::set(MemoryKind kind, int64_t bytes, MemorySide side) {
  auto k = static_cast<std::size_t>(kind);
  auto& last = side == MemorySide::device ? device_set_[k] : host_set_[k];
  add(kind, bytes - last.exchange(bytes), side);
}

MemoryBytes MemoryLedger::current() const {
  return load(current_);
}

MemoryBytes MemoryLedger::peak() const {
  return load(peak_);
}

MemoryBytes MemoryLedger::device_current() const {
  return load(device_current_);
}

MemoryBytes MemoryLedger::device_peak() const {
  return load(device_peak_);
}

void MemoryLedger::reset_peaks() {
  for (std::size_t k = 0; k < memory_kind_count; ++k) {
    peak_[k] = current_[k].load();
    device_peak_[k] = device_current_[k].load();
  }
}

MemoryCharge::MemoryCharge(std::shared_ptr<MemoryLedger> ledger, MemoryKind kind, int64_t bytes,
                           MemorySide side)
    : ledger_(std::move(ledger)), kind_(kind), side_(side), bytes_(bytes) {
  if (ledger_) ledger_->add(kind_, bytes_, side_);
}

MemoryCharge::~MemoryCharge() {
  release();
}

MemoryCharge::MemoryCharge(MemoryCharge&& other) noexcept
    : ledger_(std::move(other.ledger_)),
      kind_(other.kind_),
      side_(other.side_),
      bytes_(std::exchange(other.bytes_, 0)) {}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    release();
    ledger_ = std::move(other.ledger_);
    kind_ = other.kind_;
    side_ = other.side_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryCharge::release() {
  if (ledger_ && bytes_ != 0) ledger_->add(kind_, -bytes_, side_);
  ledger_.reset();
  bytes_ = 0;
}

}  // namespace troupe
