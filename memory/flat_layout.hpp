// FlatLayout: where each parameter of a stage lives in one flat buffer, and which
// data-parallel rank owns which slice of it (ZeRO's partitioning).
//
// Parameters are laid out back to back in order, each starting on an `align`-element
// boundary; the whole is padded so it divides into `partitions` equal partitions whose
// starts are aligned too. Rank r owns [r × partition_size, (r + 1) × partition_size).
// A parameter may straddle two or more owners: pieces_of() cuts it at partition
// boundaries; pieces_in() lists what one partition holds. Pure arithmetic, no memory.
// Thread safety: immutable once made; share freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/result.hpp"

namespace troupe {

class FlatLayout {
 public:
  /// Elements of alignment by default: 16 fp32 values, a 64-byte cache line.
  static constexpr std::size_t default_align = 16;

  /// A contiguous piece of one parameter inside one partition.
  struct Piece {
    std::size_t parameter = 0;  ///< index of the parameter
    int64_t owner = 0;          ///< the partition (rank) that holds the piece
    std::size_t parameter_offset = 0;  ///< first element of the piece within the parameter
    std::size_t flat_offset = 0;       ///< first element of the piece within the flat buffer
    std::size_t count = 0;
  };

  /// Lays out parameters of `counts` elements; partitions ≥ 1, align ≥ 1.
  static Result<FlatLayout> make(const std::vector<std::size_t>& counts, int64_t partitions,
                                 std::size_t align = default_align);

  std::size_t parameter_count() const { return offsets_.size(); }
  /// First element of parameter `p` in the flat buffer.
  std::size_t offset(std::size_t p) const { return offsets_[p]; }
  std::size_t count(std::size_t p) const { return counts_[p]; }
  /// Elements of the flat buffer, padding included; a multiple of partitions × align.
  std::size_t total() const { return partition_size_ * static_cast<std::size_t>(partitions_); }
  int64_t partitions() const { return partitions_; }
  std::size_t partition_size() const { return partition_size_; }
  std::size_t partition_begin(int64_t rank) const { return static_cast<std::size_t>(rank) * partition_size_; }
  /// The partition holding flat element `index`.
  int64_t owner_of(std::size_t index) const { return static_cast<int64_t>(index / partition_size_); }

  /// Parameter `p` cut at partition boundaries, in order.
  std::vector<Piece> pieces_of(std::size_t p) const;
  /// Every piece of every parameter inside partition `rank`, in flat order.
  std::vector<Piece> pieces_in(int64_t rank) const;

 private:
  std::vector<std::size_t> counts_;
  std::vector<std::size_t> offsets_;
  int64_t partitions_ = 1;
  std::size_t partition_size_ = 0;
};

}  // namespace troupe
