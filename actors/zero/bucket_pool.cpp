#include "actors/zero/bucket_pool.hpp"

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {
namespace {

std::chrono::steady_clock::time_point deadline_after(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(seconds));
}

}  // namespace

BucketPool::BucketPool(bool overlap, std::size_t slot_elements, std::shared_ptr<MemoryLedger> ledger,
                       double timeout_s, Tracer* tracer, std::size_t element_bytes, StoreMemory memory)
    : overlap_(overlap),
      shared_slots_(overlap ? 2 : 1),
      slot_elements_(slot_elements),
      element_bytes_(element_bytes),
      ledger_(std::move(ledger)),
      timeout_s_(timeout_s),
      tracer_(tracer),
      memory_(memory) {
  for (std::size_t i = 0; i < shared_slots_; ++i)
    slots_.push_back(Slot{make_slot(slot_elements), State::free, std::nullopt});
}

std::shared_ptr<Buffer> BucketPool::make_slot(std::size_t elements) const {
  return memory_.allocate(elements * element_bytes_, ledger_, MemoryKind::communication);
}

std::size_t BucketPool::add_dedicated(std::size_t row, std::size_t elements) {
  std::lock_guard lock(mutex_);
  slots_.push_back(Slot{make_slot(elements), State::free, row});
  return slots_.size() - 1;
}

std::optional<std::size_t> BucketPool::find_free(std::size_t row) const {
  bool has_own = false;
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].dedicated_row == row) {
      has_own = true;
      if (slots_[i].state == State::free) return i;
    }
  if (has_own) return std::nullopt;
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i].dedicated_row && slots_[i].state == State::free) return i;
  return std::nullopt;
}

bool BucketPool::can_grow() const {
  for (const Slot& s : slots_)
    if (!s.dedicated_row && s.state == State::reducing) return false;
  return true;  // every shared slot is filling: nothing will free one before this row
}

std::size_t BucketPool::acquire(std::size_t row, std::size_t elements) {
  std::unique_lock lock(mutex_);
  auto deadline = deadline_after(timeout_s_);
  std::optional<std::size_t> slot;
  while (!(slot = find_free(row))) {
    if (!error_.empty()) throw std::runtime_error(error_);
    bool dedicated = false;
    for (const Slot& s : slots_) dedicated |= s.dedicated_row == row;
    if (!dedicated && can_grow()) {
      slots_.push_back(Slot{make_slot(slot_elements_), State::free, std::nullopt});
      continue;
    }
    Tracer::Scope waiting(tracer_, "compute wait", "bucket");
    wait_for_change(lock, deadline);
  }
  if (!error_.empty()) throw std::runtime_error(error_);
  Slot& s = slots_[*slot];
  s.state = State::filling;
  memory_.zero(*s.buffer, elements * element_bytes_);  // a device's: on the compute stream
  return *slot;
}

void BucketPool::posted(std::size_t slot) {
  if (overlap_) return;
  std::unique_lock lock(mutex_);
  auto deadline = deadline_after(timeout_s_);
  while (slots_[slot].state == State::reducing) {
    if (!error_.empty()) throw std::runtime_error(error_);
    wait_for_change(lock, deadline);
  }
  // From before the row was posted: backward computes nothing in between.
  if (tracer_)
    tracer_->span("compute wait", "reduction (overlap_comm off)", slots_[slot].posting_since_us,
                  Tracer::now_us());
}

void BucketPool::wait_for_change(std::unique_lock<std::mutex>& lock,
                                 std::chrono::steady_clock::time_point deadline) {
  if (changed_.wait_until(lock, deadline) == std::cv_status::timeout)
    throw std::runtime_error(
        fmt::format("no gradient bucket came free within {} s (reductions are not completing)", timeout_s_));
}

std::shared_ptr<Buffer> BucketPool::buffer(std::size_t slot) {
  std::lock_guard lock(mutex_);
  return slots_[slot].buffer;
}

void BucketPool::reducing(std::size_t slot) {
  std::lock_guard lock(mutex_);
  slots_[slot].state = State::reducing;
  if (!overlap_ && tracer_) slots_[slot].posting_since_us = Tracer::now_us();
}

void BucketPool::release(std::size_t slot) {
  {
    std::lock_guard lock(mutex_);
    slots_[slot].state = State::free;
  }
  changed_.notify_all();
}

void BucketPool::trim() {
  std::lock_guard lock(mutex_);
  std::size_t shared = 0;
  for (auto it = slots_.begin(); it != slots_.end();) {
    bool extra = !it->dedicated_row && it->state == State::free && ++shared > shared_slots_;
    it = extra ? slots_.erase(it) : it + 1;
  }
}

void BucketPool::fail(const std::string& error) {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) error_ = error;
  }
  changed_.notify_all();
}

}  // namespace troupe
