// FlatLayout: where each parameter of a stage lives in one flat buffer, and which
// data-parallel rank owns which slice of it (ZeRO's partitioning).
//
// The buffer is a sequence of rows. A row holds consecutive parameters back to back,
// each starting on an `align`-element boundary, and is padded so it divides into
// `partitions` equal blocks whose starts are aligned too; rank r owns block r of every
// row. A row is what one collective moves: reducing a row's gradients is a true
// reduce-scatter (every rank gets its block summed), gathering a row's parameters a
// true all-gather. Rows are gradient buckets in ZeRO stages 1-2 and layers in stage 3.
// A rank's partition is its blocks of every row, in row order, back to back.
// A parameter may straddle two or more owners: pieces_of() cuts it at block
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

  /// A contiguous piece of one parameter inside one block.
  struct Piece {
    std::size_t parameter = 0;         ///< index of the parameter
    int64_t owner = 0;                 ///< the partition (rank) that holds the piece
    std::size_t parameter_offset = 0;  ///< first element of the piece within the parameter
    std::size_t flat_offset = 0;       ///< first element of the piece within the flat buffer
    std::size_t partition_offset = 0;  ///< first element of the piece within the owner's partition
    std::size_t count = 0;
  };

  /// Parameters [first_parameter, first_parameter + parameter_count) laid out from
  /// `begin`; `block` elements per partition, block × partitions in all.
  struct Row {
    std::size_t begin = 0;
    std::size_t block = 0;
    std::size_t first_parameter = 0;
    std::size_t parameter_count = 0;
    std::size_t partition_offset = 0;  ///< where this row's block starts in every partition
  };

  /// Lays out parameters of `counts` elements; partitions ≥ 1, align ≥ 1. `row_starts`
  /// lists the parameters that begin a new row, increasing (parameter 0 always does);
  /// empty = one row holding everything. `block_align` (a multiple of align; 0 = align)
  /// aligns only the blocks: 1024 elements puts each rank's block of a row on a 4 KiB
  /// page of the row's buffer, where an O_DIRECT read can land it.
  static Result<FlatLayout> make(const std::vector<std::size_t>& counts, int64_t partitions,
                                 std::size_t align = default_align, std::vector<std::size_t> row_starts = {},
                                 std::size_t block_align = 0);

  /// Rows cut so each holds at most `row_limit` elements of parameters (a parameter
  /// larger than that gets a row of its own); row_limit ≥ 1. A parameter marked in `alone`
  /// (by position; empty: none) has a row to itself whatever its size.
  static Result<FlatLayout> make_bucketed(const std::vector<std::size_t>& counts, int64_t partitions,
                                          std::size_t row_limit, std::size_t align = default_align,
                                          const std::vector<bool>& alone = {});

  std::size_t parameter_count() const { return offsets_.size(); }
  /// First element of parameter `p` in the flat buffer.
  std::size_t offset(std::size_t p) const { return offsets_[p]; }
  std::size_t count(std::size_t p) const { return counts_[p]; }
  std::size_t row_count() const { return rows_.size(); }
  const Row& row(std::size_t k) const { return rows_[k]; }
  std::size_t row_of_parameter(std::size_t p) const { return row_of_[p]; }
  /// Elements of the flat buffer, padding included.
  std::size_t total() const { return total_; }
  int64_t partitions() const { return partitions_; }
  /// Elements one rank owns: the sum of every row's block.
  std::size_t partition_size() const { return partition_size_; }
  /// First element of rank `rank`'s block of row `k` in the flat buffer.
  std::size_t block_begin(std::size_t k, int64_t rank) const {
    return rows_[k].begin + static_cast<std::size_t>(rank) * rows_[k].block;
  }
  /// The row holding flat element `index` (< total()).
  std::size_t row_of(std::size_t index) const;
  /// The partition holding flat element `index` (< total()).
  int64_t owner_of(std::size_t index) const;
  /// Elements of row `k`, every rank's block: what gathering or reducing it moves.
  std::size_t row_elements(std::size_t k) const {
    return rows_[k].block * static_cast<std::size_t>(partitions_);
  }
  /// row_elements of every row, in order.
  std::vector<std::size_t> row_sizes() const;
  /// Largest row, in elements.
  std::size_t largest_row() const;

  /// Parameter `p` cut at block boundaries, in order.
  std::vector<Piece> pieces_of(std::size_t p) const;
  /// Every piece of every parameter inside partition `rank`, in flat order.
  std::vector<Piece> pieces_in(int64_t rank) const;

 private:
  std::vector<std::size_t> counts_;
  std::vector<std::size_t> offsets_;
  std::vector<std::size_t> row_of_;
  std::vector<Row> rows_;
  int64_t partitions_ = 1;
  std::size_t partition_size_ = 0;
  std::size_t total_ = 0;
};

}  // namespace troupe
