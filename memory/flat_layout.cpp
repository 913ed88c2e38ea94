#include "memory/flat_layout.hpp"

#include <algorithm>
#include <string>

namespace troupe {
namespace {

std::size_t round_up(std::size_t n, std::size_t unit) {
  return (n + unit - 1) / unit * unit;
}

}  // namespace

Result<FlatLayout> FlatLayout::make(const std::vector<std::size_t>& counts, int64_t partitions,
                                    std::size_t align, std::vector<std::size_t> row_starts,
                                    std::size_t block_align) {
  if (partitions < 1)
    return make_error("a flat layout needs at least one partition, got " + std::to_string(partitions));
  if (align < 1) return make_error("a flat layout needs an alignment of at least one element");
  if (block_align == 0) block_align = align;
  if (block_align % align != 0)
    return make_error("a flat layout's block alignment must be a multiple of its element alignment");
  if (row_starts.empty() || row_starts.front() != 0) row_starts.insert(row_starts.begin(), 0);
  for (std::size_t i = 1; i < row_starts.size(); ++i)
    if (row_starts[i] <= row_starts[i - 1] || row_starts[i] >= std::max<std::size_t>(counts.size(), 1))
      return make_error(
          "flat layout rows must start at increasing parameter indices below the parameter count");

  FlatLayout layout;
  layout.counts_ = counts;
  layout.partitions_ = partitions;
  const auto parts = static_cast<std::size_t>(partitions);
  std::size_t next = 0;
  for (std::size_t k = 0; k < row_starts.size(); ++k) {
    Row row;
    row.begin = next;
    row.first_parameter = row_starts[k];
    std::size_t end = k + 1 < row_starts.size() ? row_starts[k + 1] : counts.size();
    row.parameter_count = end - row.first_parameter;
    for (std::size_t p = row.first_parameter; p < end; ++p) {
      layout.offsets_.push_back(next);
      layout.row_of_.push_back(k);
      next = round_up(next + counts[p], align);
    }
    // Every block starts aligned; an empty row still has one aligned unit each.
    std::size_t used = std::max<std::size_t>(next - row.begin, 1);
    row.block = round_up(used, parts * block_align) / parts;
    row.partition_offset = layout.partition_size_;
    layout.partition_size_ += row.block;
    next = row.begin + row.block * parts;
    layout.rows_.push_back(row);
  }
  layout.total_ = next;
  return layout;
}

Result<FlatLayout> FlatLayout::make_bucketed(const std::vector<std::size_t>& counts, int64_t partitions,
                                             std::size_t row_limit, std::size_t align,
                                             const std::vector<bool>& alone) {
  if (row_limit < 1) return make_error("a flat layout's rows must hold at least one element");
  auto is_alone = [&](std::size_t p) { return p < alone.size() && alone[p]; };
  std::vector<std::size_t> starts;
  std::size_t filled = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    const bool cut = filled + counts[p] > row_limit || is_alone(p) || (p > 0 && is_alone(p - 1));
    if (p > 0 && filled > 0 && cut) {
      starts.push_back(p);
      filled = 0;
    }
    filled += counts[p];
  }
  return make(counts, partitions, align, std::move(starts));
}

std::size_t FlatLayout::row_of(std::size_t index) const {
  auto after = std::upper_bound(rows_.begin(), rows_.end(), index,
                                [](std::size_t i, const Row& r) { return i < r.begin; });
  return static_cast<std::size_t>(after - rows_.begin()) - 1;
}

int64_t FlatLayout::owner_of(std::size_t index) const {
  const Row& r = rows_[row_of(index)];
  return static_cast<int64_t>((index - r.begin) / r.block);
}

std::vector<std::size_t> FlatLayout::row_sizes() const {
  std::vector<std::size_t> sizes;
  for (std::size_t k = 0; k < rows_.size(); ++k) sizes.push_back(row_elements(k));
  return sizes;
}

std::size_t FlatLayout::largest_row() const {
  std::size_t largest = 0;
  for (std::size_t k = 0; k < rows_.size(); ++k) largest = std::max(largest, row_elements(k));
  return largest;
}

std::vector<FlatLayout::Piece> FlatLayout::pieces_of(std::size_t p) const {
  std::vector<Piece> pieces;
  const Row& r = rows_[row_of_[p]];
  std::size_t begin = offsets_[p], end = offsets_[p] + counts_[p];
  for (std::size_t at = begin; at < end;) {
    auto owner = static_cast<int64_t>((at - r.begin) / r.block);
    std::size_t block_start = r.begin + static_cast<std::size_t>(owner) * r.block;
    std::size_t stop = std::min(end, block_start + r.block);
    pieces.push_back(Piece{p, owner, at - begin, at, r.partition_offset + (at - block_start), stop - at});
    at = stop;
  }
  return pieces;
}

std::vector<FlatLayout::Piece> FlatLayout::pieces_in(int64_t rank) const {
  std::vector<Piece> pieces;
  for (std::size_t k = 0; k < rows_.size(); ++k) {
    const Row& r = rows_[k];
    std::size_t begin = block_begin(k, rank), end = begin + r.block;
    for (std::size_t p = r.first_parameter; p < r.first_parameter + r.parameter_count; ++p) {
      std::size_t from = std::max(begin, offsets_[p]), to = std::min(end, offsets_[p] + counts_[p]);
      if (from < to)
        pieces.push_back(
            Piece{p, rank, from - offsets_[p], from, r.partition_offset + (from - begin), to - from});
    }
  }
  return pieces;
}

}  // namespace troupe
