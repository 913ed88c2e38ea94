#include "transport/collective.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "base/check.hpp"
#include "kernels/cpu/reduce.hpp"
#include "memory/host_buffer.hpp"
#include "transport/ring.hpp"

namespace troupe {

uint64_t transfer_tag(uint64_t op, uint64_t chunk, int64_t step, int64_t sender) {
  TROUPE_CHECK(chunk < chunks_max && step < 4096 && sender < 4096, "transfer tag field overflow");
  return (op & 0xFFFFF) << 44 | chunk << 24 | static_cast<uint64_t>(step) << 12 |
         static_cast<uint64_t>(sender);
}

namespace {

// Elements per chunk: the configured size, grown if needed so chunks fit the tag.
std::size_t chunk_elems_for(const CollectiveShape& s, std::size_t longest) {
  std::size_t elems = std::max<std::size_t>(1, s.chunk_bytes / sizeof(float));
  return std::max(elems, (longest + chunks_max - 1) / chunks_max);
}

// Runs independent per-chunk pipelines, at most `window` at a time.
class ChunkedCollective : public Collective {
 public:
  ChunkedCollective(const CollectiveShape& shape, std::size_t chunks)
      : shape_(shape), chunks_(chunks), pending_(chunks, 0) {}

  void start(TransferIo& io) override { pump(io); }
  bool done() const override { return finished_ == chunks_; }

  void on_transfer(TransferIo& io, uint64_t chunk) override {
    TROUPE_CHECK(chunk < chunks_ && pending_[chunk] > 0, "transfer completion for an idle chunk");
    if (--pending_[chunk] == 0) {
      if (advance(io, chunk)) retire(io);
    }
  }

 protected:
  // Posts the chunk's next transfers and returns false, or returns true when the chunk is done.
  virtual bool advance(TransferIo& io, uint64_t chunk) = 0;
  // Called once when a chunk becomes active.
  virtual bool begin(TransferIo& io, uint64_t chunk) = 0;

  void expect(uint64_t chunk, int transfers) { pending_[chunk] = transfers; }

  CollectiveShape shape_;

 private:
  void retire(TransferIo& io) {
    ++finished_;
    --active_;
    pump(io);
  }
  void pump(TransferIo& io) {
    while (active_ < shape_.chunks_in_flight && next_ < chunks_) {
      uint64_t chunk = next_++;
      ++active_;
      if (begin(io, chunk)) {
        ++finished_;
        --active_;
      }
    }
  }
  std::size_t chunks_;
  std::vector<int> pending_;
  std::size_t next_ = 0;
  std::size_t active_ = 0;
  std::size_t finished_ = 0;
};

class AllReduce final : public ChunkedCollective {
 public:
  AllReduce(const CollectiveShape& shape, float* data, std::size_t count, ReduceOp op,
            std::size_t chunk_elems)
      : ChunkedCollective(
            shape, shape.world_size < 2 ? 0 : ring::chunks_per_segment(count, shape.world_size, chunk_elems)),
        data_(data),
        count_(count),
        op_(op),
        chunk_elems_(chunk_elems),
        steps_(chunk_count()) {
    std::size_t slots = std::min(shape.chunks_in_flight, steps_.size());
    for (std::size_t i = 0; i < slots; ++i) {
      scratch_.emplace_back(chunk_elems * sizeof(float));
      free_slots_.push_back(i);
    }
    slot_of_.assign(steps_.size(), 0);
  }

  std::string describe() const override {
    return fmt::format("all_reduce #{} of {} bytes", shape_.id, count_ * sizeof(float));
  }

 private:
  std::size_t chunk_count() const {
    return shape_.world_size < 2 ? 0 : ring::chunks_per_segment(count_, shape_.world_size, chunk_elems_);
  }

  bool begin(TransferIo& io, uint64_t chunk) override {
    TROUPE_CHECK(!free_slots_.empty(), "more chunks in flight than scratch buffers");
    slot_of_[chunk] = free_slots_.back();
    free_slots_.pop_back();
    steps_[chunk] = 0;
    return post_until_pending(io, chunk);
  }

  bool advance(TransferIo& io, uint64_t chunk) override {
    finish_step(chunk);
    return post_until_pending(io, chunk);
  }

  float* scratch(uint64_t chunk) { return scratch_[slot_of_[chunk]].as<float>(); }

  // Posts the current step's transfers; steps that move nothing are finished at once.
  bool post_until_pending(TransferIo& io, uint64_t chunk) {
    int64_t n = shape_.world_size, r = shape_.rank;
    while (steps_[chunk] < ring::all_reduce_steps(n)) {
      int64_t step = steps_[chunk];
      auto plan = ring::all_reduce_step(r, n, step);
      auto send = ring::chunk(count_, n, plan.send_segment, chunk, chunk_elems_);
      auto recv = ring::chunk(count_, n, plan.recv_segment, chunk, chunk_elems_);
      int transfers = (send.count > 0) + (recv.count > 0);
      expect(chunk, transfers);
      int64_t right = (r + 1) % n, left = (r + n - 1) % n;
      if (send.count > 0)
        io.post_send(right, data_ + send.begin, send.count * sizeof(float),
                     transfer_tag(shape_.id, chunk, step, r), shape_.id, chunk);
      if (recv.count > 0) {
        float* into = plan.reduce ? scratch(chunk) : data_ + recv.begin;
        io.post_recv(left, into, recv.count * sizeof(float), transfer_tag(shape_.id, chunk, step, left),
                     shape_.id, chunk);
      }
      if (transfers > 0) return false;
      finish_step(chunk);
    }
    free_slots_.push_back(slot_of_[chunk]);
    return true;
  }

  void finish_step(uint64_t chunk) {
    int64_t n = shape_.world_size, r = shape_.rank;
    int64_t step = steps_[chunk]++;
    auto plan = ring::all_reduce_step(r, n, step);
    if (!plan.reduce) return;
    auto recv = ring::chunk(count_, n, plan.recv_segment, chunk, chunk_elems_);
    kernels::add_into(data_ + recv.begin, scratch(chunk), recv.count);
    // The owner scales its finished segment once, so every rank receives identical bits.
    if (step == n - 2 && op_ == ReduceOp::average)
      kernels::scale(data_ + recv.begin, recv.count, 1.0f / static_cast<float>(n));
  }

  float* data_;
  std::size_t count_;
  ReduceOp op_;
  std::size_t chunk_elems_;
  std::vector<int64_t> steps_;
  std::vector<HostBuffer> scratch_;  // one receive buffer per chunk in flight
  std::vector<std::size_t> free_slots_;
  std::vector<std::size_t> slot_of_;
};

class Broadcast final : public ChunkedCollective {
 public:
  Broadcast(const CollectiveShape& shape, float* data, std::size_t count, int64_t root,
            std::size_t chunk_elems)
      : ChunkedCollective(shape, shape.world_size < 2 ? 0 : (count + chunk_elems - 1) / chunk_elems),
        data_(data),
        count_(count),
        root_(root),
        chunk_elems_(chunk_elems),
        chunk_count_(shape.world_size < 2 ? 0 : (count + chunk_elems - 1) / chunk_elems),
        received_(chunk_count_, false) {}

  std::string describe() const override {
    return fmt::format("broadcast #{} of {} bytes from rank {}", shape_.id, count_ * sizeof(float), root_);
  }

 private:
  int64_t position() const { return (shape_.rank - root_ + shape_.world_size) % shape_.world_size; }
  ring::Span span(uint64_t chunk) const {
    std::size_t begin = chunk * chunk_elems_;
    return {begin, std::min(count_, begin + chunk_elems_) - begin};
  }

  bool begin(TransferIo& io, uint64_t chunk) override {
    if (position() == 0) return forward(io, chunk);
    int64_t prev = (shape_.rank + shape_.world_size - 1) % shape_.world_size;
    auto s = span(chunk);
    expect(chunk, 1);
    io.post_recv(prev, data_ + s.begin, s.count * sizeof(float), transfer_tag(shape_.id, chunk, 0, prev),
                 shape_.id, chunk);
    return false;
  }

  bool advance(TransferIo& io, uint64_t chunk) override {
    if (received_[chunk] || position() == 0) return true;  // the forward finished
    received_[chunk] = true;
    return forward(io, chunk);
  }

  bool forward(TransferIo& io, uint64_t chunk) {
    if (position() == shape_.world_size - 1) return true;
    received_[chunk] = true;
    int64_t next = (shape_.rank + 1) % shape_.world_size;
    auto s = span(chunk);
    expect(chunk, 1);
    io.post_send(next, data_ + s.begin, s.count * sizeof(float),
                 transfer_tag(shape_.id, chunk, 0, shape_.rank), shape_.id, chunk);
    return false;
  }

  float* data_;
  std::size_t count_;
  int64_t root_;
  std::size_t chunk_elems_;
  std::size_t chunk_count_;
  std::vector<bool> received_;
};

}  // namespace

std::unique_ptr<Collective> make_all_reduce(const CollectiveShape& shape, float* data, std::size_t count,
                                            ReduceOp op) {
  std::size_t longest = ring::segment(count, shape.world_size, 0).count;
  return std::make_unique<AllReduce>(shape, data, count, op, chunk_elems_for(shape, longest));
}

std::unique_ptr<Collective> make_broadcast(const CollectiveShape& shape, float* data, std::size_t count,
                                           int64_t root) {
  TROUPE_CHECK(root >= 0 && root < shape.world_size, "broadcast root out of range");
  return std::make_unique<Broadcast>(shape, data, count, root, chunk_elems_for(shape, count));
}

}  // namespace troupe
