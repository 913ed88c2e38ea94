#include "memory/flat_layout.hpp"

#include <algorithm>
#include <string>

namespace troupe {
namespace {

std::size_t round_up(std::size_t n, std::size_t unit) { return (n + unit - 1) / unit * unit; }

}  // namespace

Result<FlatLayout> FlatLayout::make(const std::vector<std::size_t>& counts, int64_t partitions, std::size_t align) {
  if (partitions < 1)
    return make_error("a flat layout needs at least one partition, got " + std::to_string(partitions));
  if (align < 1) return make_error("a flat layout needs an alignment of at least one element");
  FlatLayout layout;
  layout.counts_ = counts;
  layout.partitions_ = partitions;
  std::size_t next = 0;
  for (std::size_t n : counts) {
    layout.offsets_.push_back(next);
    next = round_up(next + n, align);
  }
  // Every partition starts aligned; an empty model still has one aligned unit each.
  std::size_t per_partition = round_up(std::max<std::size_t>(next, 1), static_cast<std::size_t>(partitions) * align) /
                              static_cast<std::size_t>(partitions);
  layout.partition_size_ = per_partition;
  return layout;
}

std::vector<FlatLayout::Piece> FlatLayout::pieces_of(std::size_t p) const {
  std::vector<Piece> pieces;
  std::size_t begin = offsets_[p], end = offsets_[p] + counts_[p];
  for (std::size_t at = begin; at < end;) {
    int64_t owner = owner_of(at);
    std::size_t stop = std::min(end, partition_begin(owner + 1));
    pieces.push_back(Piece{p, owner, at - begin, at, stop - at});
    at = stop;
  }
  return pieces;
}

std::vector<FlatLayout::Piece> FlatLayout::pieces_in(int64_t rank) const {
  std::size_t begin = partition_begin(rank), end = partition_begin(rank + 1);
  // The first parameter that ends after `begin`: offsets are increasing.
  auto first = std::upper_bound(offsets_.begin(), offsets_.end(), begin);
  std::size_t p = first == offsets_.begin() ? 0 : static_cast<std::size_t>(first - offsets_.begin()) - 1;
  std::vector<Piece> pieces;
  for (; p < offsets_.size() && offsets_[p] < end; ++p) {
    std::size_t from = std::max(begin, offsets_[p]), to = std::min(end, offsets_[p] + counts_[p]);
    if (from < to) pieces.push_back(Piece{p, rank, from - offsets_[p], from, to - from});
  }
  return pieces;
}

}  // namespace troupe
