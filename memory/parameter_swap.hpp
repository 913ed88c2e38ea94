// ParameterSwap: ZeRO-Infinity's parameter offload ([offload] param = "nvme"). This rank's
// block of every stage-3 row that is not persistent lives in files of the NVMe tier
// instead of host memory; only the rows being used are in memory, gathered.
//
// A row's block is cut into pieces of at most piece_limit elements, one key each
// ("param-<row>-<piece>.bin"). The pieces are the offload manager's sub-groups for that
// row, so its optimizer pass reads a piece's parameters with the piece's state, updates
// both and writes both back. read_block brings a whole block into page-aligned memory:
// the fetcher reads it straight into this rank's place in the row's gather buffer, and
// the all-gather then runs in place. Pieces start on 4 KiB pages of the block (piece_limit
// is a multiple of 1024 elements), which O_DIRECT needs.
//
// Thread safety: read_block and write_block from any thread (NvmeStore's rules: never
// two operations on one row at once); the rest is immutable after open.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "memory/flat_layout.hpp"
#include "memory/nvme_store.hpp"

namespace troupe {

class ParameterSwap {
 public:
  struct Piece {
    std::string key;
    std::size_t offset = 0;  ///< elements into the row's block
    std::size_t count = 0;
  };

  /// The swap of the rows of `layout` that `persistent_rows` does not keep in memory, in
  /// `store`, cut into pieces of `piece_limit` elements (parameter_piece_size in
  /// memory/offload_plan.hpp). Fails when a row's block or the limit is not a whole number
  /// of pages.
  static Result<std::shared_ptr<ParameterSwap>> make(std::unique_ptr<NvmeStore> store,
                                                     const FlatLayout& layout,
                                                     const std::vector<bool>& persistent_rows,
                                                     std::size_t piece_limit);

  bool on_nvme(std::size_t row) const { return !pieces_[row].empty(); }
  const std::vector<Piece>& pieces(std::size_t row) const { return pieces_[row]; }

  /// Reads row `row`'s block into `block` (4 KiB aligned, the row's block of elements);
  /// `done` runs once, on the store's completion thread, with the first error.
  void read_block(std::size_t row, float* block, IoCallback done);
  /// Writes `block` (4 KiB aligned) as row `row`'s block and waits for it (bounded).
  Status write_block(std::size_t row, const float* block);

  NvmeStore& store() { return *store_; }

 private:
  std::unique_ptr<NvmeStore> store_;
  std::vector<std::vector<Piece>> pieces_;  // by row; empty when the row stays in memory
};

}  // namespace troupe
