#include "memory/memory_ledger.hpp"

#include <utility>

namespace troupe {
namespace {

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
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

void MemoryLedger::add(MemoryKind kind, int64_t bytes) {
  auto k = static_cast<std::size_t>(kind);
  raise_peak(peak_[k], current_[k] += bytes);
}

void MemoryLedger::set(MemoryKind kind, int64_t bytes) {
  auto k = static_cast<std::size_t>(kind);
  current_[k] = bytes;
  raise_peak(peak_[k], bytes);
}

MemoryBytes MemoryLedger::current() const {
  MemoryBytes out;
  for (std::size_t k = 0; k < memory_kind_count; ++k) out.bytes[k] = current_[k].load();
  return out;
}

MemoryBytes MemoryLedger::peak() const {
  MemoryBytes out;
  for (std::size_t k = 0; k < memory_kind_count; ++k) out.bytes[k] = peak_[k].load();
  return out;
}

void MemoryLedger::reset_peaks() {
  for (std::size_t k = 0; k < memory_kind_count; ++k) peak_[k] = current_[k].load();
}

MemoryCharge::MemoryCharge(std::shared_ptr<MemoryLedger> ledger, MemoryKind kind, int64_t bytes)
    : ledger_(std::move(ledger)), kind_(kind), bytes_(bytes) {
  if (ledger_) ledger_->add(kind_, bytes_);
}

MemoryCharge::~MemoryCharge() {
  release();
}

MemoryCharge::MemoryCharge(MemoryCharge&& other) noexcept
    : ledger_(std::move(other.ledger_)), kind_(other.kind_), bytes_(std::exchange(other.bytes_, 0)) {}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    release();
    ledger_ = std::move(other.ledger_);
    kind_ = other.kind_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryCharge::release() {
  if (ledger_ && bytes_ != 0) ledger_->add(kind_, -bytes_);
  ledger_.reset();
  bytes_ = 0;
}

}  // namespace troupe
