#include "transport/collective.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "base/check.hpp"
#include "memory/host_buffer.hpp"
#include "transport/ring.hpp"

namespace troupe {

uint64_t transfer_tag(const CollectiveShape& s, uint64_t chunk, int64_t step, int64_t sender) {
  using namespace tag_bits;
  TROUPE_CHECK(chunk < chunks_max && step < (int64_t{1} << tag_bits::step) && sender < world_size_max &&
                   s.communicator < communicators_max,
               "transfer tag field overflow");
  auto field = [](uint64_t v, int bits) { return v & ((uint64_t{1} << bits) - 1); };
  return field(s.communicator, communicator) << communicator_shift |
         field(s.descriptor, descriptor) << descriptor_shift | field(s.id, op) << op_shift |
         chunk << chunk_shift | static_cast<uint64_t>(step) << step_shift | static_cast<uint64_t>(sender);
}

uint64_t point_to_point_tag(uint64_t sequence, int64_t sender) {
  TROUPE_CHECK(sender < world_size_max, "sender out of range");
  constexpr int bits = tag_bits::point_to_point_shift - tag_bits::chunk_shift;
  return uint64_t{1} << tag_bits::point_to_point_shift |
         (sequence & ((uint64_t{1} << bits) - 1)) << tag_bits::chunk_shift | static_cast<uint64_t>(sender);
}

uint64_t point_to_point_key_tag(uint64_t key, int64_t sender) {
  TROUPE_CHECK(sender < world_size_max, "sender out of range");
  TROUPE_CHECK(key < point_to_point_keys, "point-to-point key out of range");
  constexpr int keyed_bit = tag_bits::point_to_point_shift - 1;  // sequences never reach it
  return uint64_t{1} << tag_bits::point_to_point_shift | uint64_t{1} << keyed_bit |
         key << tag_bits::chunk_shift | static_cast<uint64_t>(sender);
}

uint64_t describe_call(const char* kind, DataType type, std::size_t count, int64_t root, ReduceOp op) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the call's identity
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  for (const char* c = kind; *c; ++c) mix(static_cast<unsigned char>(*c));
  mix(static_cast<uint64_t>(type));
  mix(count);
  mix(static_cast<uint64_t>(root));
  mix(static_cast<uint64_t>(op));
  return (h ^ (h >> 32)) & ((uint64_t{1} << tag_bits::descriptor) - 1);
}

namespace {

// Elements per chunk: the configured size, grown if needed so chunks fit the tag.
std::size_t chunk_elems_for(const CollectiveShape& s, std::size_t longest, std::size_t element) {
  std::size_t elems = std::max<std::size_t>(1, s.chunk_bytes / element);
  return std::max(elems, (longest + chunks_max - 1) / chunks_max);
}

// Runs independent per-chunk pipelines, at most chunks_in_flight at a time.
class ChunkedCollective : public Collective {
 public:
  ChunkedCollective(const CollectiveShape& shape, std::size_t chunks)
      : shape_(shape), chunks_(chunks), pending_(chunks, 0) {}

  void start(TransferIo& io) override { pump(io); }
  bool done() const override { return finished_ == chunks_; }

  void on_transfer(TransferIo& io, uint64_t chunk) override {
    TROUPE_CHECK(chunk < chunks_ && pending_[chunk] > 0, "transfer completion for an idle chunk");
    if (--pending_[chunk] == 0 && advance(io, chunk)) retire(io);
  }

 protected:
  // Called once when a chunk becomes active: posts its first transfers and returns
  // false, or returns true if the chunk had nothing to move.
  virtual bool begin(TransferIo& io, uint64_t chunk) = 0;
  // Called when the chunk's posted transfers are all done; same contract as begin.
  virtual bool advance(TransferIo& io, uint64_t chunk) = 0;

  void expect(uint64_t chunk, int transfers) { pending_[chunk] = transfers; }
  uint64_t tag(uint64_t chunk, int64_t step, int64_t sender) const {
    return transfer_tag(shape_, chunk, step, sender);
  }

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

// Which ring phases a collective runs, and whose segment each rank ends up owning.
struct RingPlan {
  const char* kind;
  bool reduce;    // reduce-scatter phase
  bool gather;    // all-gather phase
  int64_t shift;  // rank r acts as ring position r + shift; -1 makes rank r own segment r
  bool in_place;  // partial sums live in the buffer (all-reduce) or in carry buffers
};

// The ring collectives: all-reduce, reduce-scatter and all-gather (ring.hpp).
class Ring final : public ChunkedCollective {
 public:
  Ring(const CollectiveShape& shape, RingPlan plan, std::byte* buffer, std::byte* output, std::size_t total,
       DataType type, ReduceOp op)
      : ChunkedCollective(shape, chunk_count(shape, total, type)),
        plan_(plan),
        buffer_(buffer),
        output_(output),
        total_(total),
        type_(type),
        op_(op),
        element_(element_bytes(type)),
        chunk_elems_(chunk_elems_for(shape, ring::segment(total, shape.world_size, 0).count, element_)),
        steps_(chunk_count(shape, total, type), 0),
        slot_of_(steps_.size(), 0) {
    std::size_t slots = std::min(shape.chunks_in_flight, steps_.size());
    bool carries = plan.reduce && !plan.in_place;
    for (std::size_t i = 0; i < slots; ++i) {
      scratch_.emplace_back(plan.reduce ? chunk_elems_ * element_ : 0);
      carry_.emplace_back(carries ? chunk_elems_ * element_ : 0);
      free_slots_.push_back(i);
    }
  }

  std::string describe() const override {
    return fmt::format("{} #{} of {} {} bytes on communicator {}", plan_.kind, shape_.id, total_ * element_,
                       data_type_name(type_), shape_.communicator);
  }

 private:
  static std::size_t chunk_count(const CollectiveShape& s, std::size_t total, DataType type) {
    if (s.world_size < 2) return 0;
    std::size_t longest = ring::segment(total, s.world_size, 0).count;
    return ring::chunks_per_segment(total, s.world_size, chunk_elems_for(s, longest, element_bytes(type)));
  }
  int64_t steps_total() const { return (plan_.reduce + plan_.gather) * (shape_.world_size - 1); }
  // The ring step (ring.hpp numbering) of the chunk's local step `i`.
  int64_t ring_step(int64_t i) const { return plan_.reduce ? i : i + shape_.world_size - 1; }
  int64_t position() const {
    return ((shape_.rank + plan_.shift) % shape_.world_size + shape_.world_size) % shape_.world_size;
  }
  std::byte* at(std::size_t element) const { return buffer_ + element * element_; }
  std::byte* scratch(uint64_t chunk) { return scratch_[slot_of_[chunk]].data(); }
  std::byte* carry(uint64_t chunk) { return carry_[slot_of_[chunk]].data(); }

  bool begin(TransferIo& io, uint64_t chunk) override {
    TROUPE_CHECK(!free_slots_.empty(), "more chunks in flight than scratch buffers");
    slot_of_[chunk] = free_slots_.back();
    free_slots_.pop_back();
    return post_until_pending(io, chunk);
  }

  bool advance(TransferIo& io, uint64_t chunk) override {
    finish_step(chunk);
    return post_until_pending(io, chunk);
  }

  // Posts the current step's transfers; steps that move nothing are finished at once.
  bool post_until_pending(TransferIo& io, uint64_t chunk) {
    int64_t n = shape_.world_size, r = shape_.rank;
    while (steps_[chunk] < steps_total()) {
      int64_t step = ring_step(steps_[chunk]);
      auto p = ring::all_reduce_step(position(), n, step);
      auto send = ring::chunk(total_, n, p.send_segment, chunk, chunk_elems_);
      auto recv = ring::chunk(total_, n, p.recv_segment, chunk, chunk_elems_);
      int transfers = (send.count > 0) + (recv.count > 0);
      expect(chunk, transfers);
      bool carried = p.reduce && !plan_.in_place && step > 0;
      if (send.count > 0)
        io.post_send((r + 1) % n, carried ? carry(chunk) : at(send.begin), send.count * element_,
                     tag(chunk, step, r), shape_.key, chunk);
      if (recv.count > 0) {
        int64_t left = (r + n - 1) % n;
        io.post_recv(left, p.reduce ? scratch(chunk) : at(recv.begin), recv.count * element_,
                     tag(chunk, step, left), shape_.key, chunk);
      }
      if (transfers > 0) return false;
      finish_step(chunk);
    }
    free_slots_.push_back(slot_of_[chunk]);
    return true;
  }

  void finish_step(uint64_t chunk) {
    int64_t n = shape_.world_size;
    int64_t step = ring_step(steps_[chunk]++);
    auto p = ring::all_reduce_step(position(), n, step);
    if (!p.reduce) return;
    auto recv = ring::chunk(total_, n, p.recv_segment, chunk, chunk_elems_);
    bool last = step == n - 2;
    std::byte* into = at(recv.begin);
    if (!plan_.in_place) {
      // Out of place: partial = input + received, kept in the carry buffer, or in the
      // output once the segment is complete. memmove: the output may alias the input.
      auto owned = ring::segment(total_, n, p.recv_segment);
      into = last ? output_ + (recv.begin - owned.begin) * element_ : carry(chunk);
      std::memmove(into, at(recv.begin), recv.count * element_);
    }
    kernels::add_into(into, scratch(chunk), recv.count, type_);
    // The owner scales its finished segment once, so every rank receives identical bits.
    if (last && op_ == ReduceOp::average)
      kernels::scale(into, recv.count, 1.0f / static_cast<float>(n), type_);
  }

  RingPlan plan_;
  std::byte* buffer_;
  std::byte* output_;
  std::size_t total_;
  DataType type_;
  ReduceOp op_;
  std::size_t element_;
  std::size_t chunk_elems_;
  std::vector<int64_t> steps_;
  std::vector<std::size_t> slot_of_;
  std::vector<HostBuffer> scratch_;  // per chunk in flight: what arrives to be reduced
  std::vector<HostBuffer> carry_;    // per chunk in flight: out-of-place partial sums
  std::vector<std::size_t> free_slots_;
};

class Broadcast final : public ChunkedCollective {
 public:
  Broadcast(const CollectiveShape& shape, std::byte* data, std::size_t bytes, int64_t root,
            std::size_t chunk_bytes)
      : ChunkedCollective(shape, shape.world_size < 2 ? 0 : (bytes + chunk_bytes - 1) / chunk_bytes),
        data_(data),
        bytes_(bytes),
        root_(root),
        chunk_bytes_(chunk_bytes),
        received_(shape.world_size < 2 ? 0 : (bytes + chunk_bytes - 1) / chunk_bytes, false) {}

  std::string describe() const override {
    return fmt::format("broadcast #{} of {} bytes from rank {} on communicator {}", shape_.id, bytes_, root_,
                       shape_.communicator);
  }

 private:
  int64_t position() const { return (shape_.rank - root_ + shape_.world_size) % shape_.world_size; }
  ring::Span span(uint64_t chunk) const {
    std::size_t begin = chunk * chunk_bytes_;
    return {begin, std::min(bytes_, begin + chunk_bytes_) - begin};
  }

  bool begin(TransferIo& io, uint64_t chunk) override {
    if (position() == 0) return forward(io, chunk);
    int64_t prev = (shape_.rank + shape_.world_size - 1) % shape_.world_size;
    auto s = span(chunk);
    expect(chunk, 1);
    io.post_recv(prev, data_ + s.begin, s.count, tag(chunk, 0, prev), shape_.key, chunk);
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
    auto s = span(chunk);
    expect(chunk, 1);
    io.post_send((shape_.rank + 1) % shape_.world_size, data_ + s.begin, s.count, tag(chunk, 0, shape_.rank),
                 shape_.key, chunk);
    return false;
  }

  std::byte* data_;
  std::size_t bytes_;
  int64_t root_;
  std::size_t chunk_bytes_;
  std::vector<bool> received_;
};

// Recursive doubling. Ranks at or above the largest power of two p fold their data into
// rank r - p first and receive the result from it last; ranks below p exchange whole
// buffers with partner r xor 2^k at step k and add. Addition is commutative, so both
// partners compute the same bits, and so does every rank at the end.
class RecursiveDoubling final : public Collective {
 public:
  RecursiveDoubling(const CollectiveShape& shape, std::byte* data, std::size_t count, DataType type,
                    ReduceOp op)
      : shape_(shape),
        data_(data),
        count_(count),
        type_(type),
        op_(op),
        bytes_(count * element_bytes(type)),
        scratch_(bytes_) {
    while (power_ * 2 <= shape.world_size) power_ *= 2;
  }

  void start(TransferIo& io) override { advance(io); }
  void on_transfer(TransferIo& io, uint64_t) override {
    TROUPE_CHECK(pending_ > 0, "transfer completion with nothing pending");
    if (--pending_ == 0) advance(io);
  }
  bool done() const override { return done_; }
  std::string describe() const override {
    return fmt::format("all_reduce #{} of {} {} bytes on communicator {}", shape_.id, bytes_,
                       data_type_name(type_), shape_.communicator);
  }

 private:
  // Phases: 0 fold in, 1..log2(p) exchanges, then fold out; `stage_` is the next to post.
  void advance(TransferIo& io) {
    while (!done_ && pending_ == 0) {
      if (reduce_pending_) {
        kernels::add_into(data_, scratch_.data(), count_, type_);
        reduce_pending_ = false;
      }
      post_stage(io);
    }
  }

  void post_stage(TransferIo& io) {
    int64_t r = shape_.rank, n = shape_.world_size;
    int64_t exchanges = 0;
    for (int64_t d = 1; d < power_; d *= 2) ++exchanges;
    int64_t stage = stage_++;
    if (n == 1 || count_ == 0) return finish();
    if (stage == 0) {  // fold in
      if (r >= power_)
        send(io, r - power_, stage);
      else if (r + power_ < n)
        receive(io, r + power_, stage, true);
      return;
    }
    if (stage <= exchanges) {
      if (r >= power_) return;  // waits out the exchanges
      int64_t partner = r ^ (int64_t{1} << (stage - 1));
      send(io, partner, stage);
      receive(io, partner, stage, true);
      return;
    }
    if (stage == exchanges + 1) {  // fold out
      if (op_ == ReduceOp::average) kernels::scale(data_, count_, 1.0f / static_cast<float>(n), type_);
      if (r >= power_)
        receive(io, r - power_, stage, false);
      else if (r + power_ < n)
        send(io, r + power_, stage);
      return;
    }
    finish();
  }

  void send(TransferIo& io, int64_t peer, int64_t stage) {
    ++pending_;
    io.post_send(peer, data_, bytes_, transfer_tag(shape_, 0, stage, shape_.rank), shape_.key, 0);
  }
  void receive(TransferIo& io, int64_t peer, int64_t stage, bool reduce) {
    ++pending_;
    reduce_pending_ = reduce;
    io.post_recv(peer, reduce ? scratch_.data() : data_, bytes_, transfer_tag(shape_, 0, stage, peer),
                 shape_.key, 0);
  }
  void finish() { done_ = true; }

  CollectiveShape shape_;
  std::byte* data_;
  std::size_t count_;
  DataType type_;
  ReduceOp op_;
  std::size_t bytes_;
  HostBuffer scratch_;
  int64_t power_ = 1;
  int64_t stage_ = 0;
  int pending_ = 0;
  bool reduce_pending_ = false;
  bool done_ = false;
};

// A collective with nothing to move (a world of one): done as soon as it starts.
class Immediate final : public Collective {
 public:
  explicit Immediate(std::string what) : what_(std::move(what)) {}
  void start(TransferIo&) override {}
  void on_transfer(TransferIo&, uint64_t) override { TROUPE_CHECK(false, "no transfers expected"); }
  bool done() const override { return true; }
  std::string describe() const override { return what_; }

 private:
  std::string what_;
};

// One message to or from one peer.
class PointToPoint final : public Collective {
 public:
  PointToPoint(uint64_t id, bool receive, int64_t peer, std::byte* data, std::size_t bytes, uint64_t tag)
      : id_(id), receive_(receive), peer_(peer), data_(data), bytes_(bytes), tag_(tag) {}
  void start(TransferIo& io) override {
    if (receive_)
      io.post_recv(peer_, data_, bytes_, tag_, id_, 0);
    else
      io.post_send(peer_, data_, bytes_, tag_, id_, 0);
  }
  void on_transfer(TransferIo&, uint64_t) override { done_ = true; }
  bool done() const override { return done_; }
  std::string describe() const override {
    return fmt::format("{} of {} bytes {} rank {}", receive_ ? "recv" : "send", bytes_,
                       receive_ ? "from" : "to", peer_);
  }

 private:
  uint64_t id_;
  bool receive_;
  int64_t peer_;
  std::byte* data_;
  std::size_t bytes_;
  uint64_t tag_;
  bool done_ = false;
};

std::byte* bytes_of(void* p) {
  return static_cast<std::byte*>(p);
}

}  // namespace

std::unique_ptr<Collective> make_all_reduce(const CollectiveShape& shape, void* data, std::size_t count,
                                            DataType type, ReduceOp op) {
  return std::make_unique<Ring>(shape, RingPlan{"all_reduce", true, true, 0, true}, bytes_of(data), nullptr,
                                count, type, op);
}

std::unique_ptr<Collective> make_all_reduce_small(const CollectiveShape& shape, void* data, std::size_t count,
                                                  DataType type, ReduceOp op) {
  return std::make_unique<RecursiveDoubling>(shape, bytes_of(data), count, type, op);
}

std::unique_ptr<Collective> make_reduce_scatter(const CollectiveShape& shape, const void* input, void* output,
                                                std::size_t count, DataType type, ReduceOp op) {
  if (shape.world_size == 1) {
    // memmove's pointers must not be null even for no bytes, and an empty vector's data() is.
    if (count > 0) std::memmove(output, input, count * element_bytes(type));
    return std::make_unique<Immediate>("reduce_scatter in a world of one");
  }
  // The ring reads the input and writes only `output`: it never stores through `input`.
  auto* in = const_cast<std::byte*>(static_cast<const std::byte*>(input));
  return std::make_unique<Ring>(shape, RingPlan{"reduce_scatter", true, false, -1, false}, in,
                                bytes_of(output), count * static_cast<std::size_t>(shape.world_size), type,
                                op);
}

std::unique_ptr<Collective> make_all_gather(const CollectiveShape& shape, void* data, std::size_t count,
                                            DataType type) {
  return make_all_gather_segments(shape, data, count * static_cast<std::size_t>(shape.world_size), type);
}

std::unique_ptr<Collective> make_reduce_scatter_segments(const CollectiveShape& shape, void* data,
                                                         std::size_t total, DataType type, ReduceOp op) {
  return std::make_unique<Ring>(shape, RingPlan{"reduce_scatter", true, false, -1, true}, bytes_of(data),
                                nullptr, total, type, op);
}

std::unique_ptr<Collective> make_all_gather_segments(const CollectiveShape& shape, void* data,
                                                     std::size_t total, DataType type) {
  return std::make_unique<Ring>(shape, RingPlan{"all_gather", false, true, -1, true}, bytes_of(data), nullptr,
                                total, type, ReduceOp::sum);
}

std::unique_ptr<Collective> make_send(uint64_t id, int64_t peer, const void* data, std::size_t bytes,
                                      uint64_t tag) {
  auto* d = const_cast<std::byte*>(static_cast<const std::byte*>(data));  // only read
  return std::make_unique<PointToPoint>(id, false, peer, d, bytes, tag);
}

std::unique_ptr<Collective> make_recv(uint64_t id, int64_t peer, void* data, std::size_t bytes,
                                      uint64_t tag) {
  return std::make_unique<PointToPoint>(id, true, peer, bytes_of(data), bytes, tag);
}

std::unique_ptr<Collective> make_broadcast(const CollectiveShape& shape, void* data, std::size_t bytes,
                                           int64_t root) {
  TROUPE_CHECK(root >= 0 && root < shape.world_size, "broadcast root out of range");
  std::size_t chunk = std::max<std::size_t>(1, shape.chunk_bytes);
  chunk = std::max(chunk, (bytes + chunks_max - 1) / chunks_max);
  return std::make_unique<Broadcast>(shape, bytes_of(data), bytes, root, chunk);
}

}  // namespace troupe
