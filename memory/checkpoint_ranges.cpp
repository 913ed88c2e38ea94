#include "memory/checkpoint_ranges.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace troupe {
namespace {

// By parameter: its saved elements as disjoint ranges by first element. Where ranges
// overlap (replicas saving the same elements) the one starting first, or listed first
// on equal starts, keeps them.
using Index = std::map<std::string, std::vector<SavedRange>>;

Index index_of(const std::vector<SavedRange>& saved) {
  std::map<std::string, std::vector<const SavedRange*>> sorted;
  for (const SavedRange& s : saved)
    if (s.count > 0) sorted[s.parameter].push_back(&s);
  Index index;
  for (auto& [name, ranges] : sorted) {
    std::stable_sort(ranges.begin(), ranges.end(),
                     [](const SavedRange* a, const SavedRange* b) { return a->offset < b->offset; });
    std::vector<SavedRange>& disjoint = index[name];
    std::size_t covered = 0;  // the end of what the ranges kept so far hold
    for (const SavedRange* s : ranges) {
      const std::size_t end = s->offset + s->count;
      if (end <= covered) continue;
      const std::size_t skip = covered > s->offset ? covered - s->offset : 0;
      disjoint.push_back(SavedRange{name, s->offset + skip, s->count - skip, s->file, s->at + skip});
      covered = end;
    }
  }
  return index;
}

void append(std::vector<RangeRead>& reads, RangeRead read) {
  if (!reads.empty()) {
    RangeRead& last = reads.back();
    if (last.file == read.file && last.from + last.count == read.from &&
        last.into + last.count == read.into) {
      last.count += read.count;
      return;
    }
  }
  reads.push_back(std::move(read));
}

}  // namespace

Result<std::vector<RangeRead>> plan_reads(const std::vector<SavedRange>& saved,
                                          const std::vector<WantedRange>& wanted) {
  const Index index = index_of(saved);
  std::vector<RangeRead> reads;
  for (const WantedRange& w : wanted) {
    std::size_t next = w.offset;  // the first element of w not read yet
    const std::size_t end = w.offset + w.count;
    auto found = index.find(w.parameter);
    if (found != index.end()) {
      const std::vector<SavedRange>& ranges = found->second;
      // The last range starting at or before `next`; the ones after it follow in order.
      auto s = std::upper_bound(ranges.begin(), ranges.end(), next,
                                [](std::size_t at, const SavedRange& r) { return at < r.offset; });
      if (s != ranges.begin()) --s;
      for (; s != ranges.end() && next < end; ++s) {
        const std::size_t s_end = s->offset + s->count;
        if (s_end <= next) continue;
        if (s->offset > next) break;  // a gap
        const std::size_t n = std::min(end, s_end) - next;
        append(reads, RangeRead{s->file, s->at + (next - s->offset), n, w.into + (next - w.offset)});
        next += n;
      }
    }
    if (next < end)
      return make_error(
          fmt::format("the checkpoint holds no value for elements [{}, {}) of parameter '{}': it "
                      "was saved from another model, or is incomplete",
                      next, end, w.parameter));
  }
  return reads;
}

std::vector<ShardRun> whole_runs(const TensorShard& shard, std::size_t offset, std::size_t count) {
  if (shard.whole()) return {ShardRun{offset, count, offset}};
  const auto& shape = shard.whole_shape;
  const auto dim = static_cast<std::size_t>(shard.dim);
  std::size_t inner = 1;
  for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= static_cast<std::size_t>(shape[d]);
  const auto along = static_cast<std::size_t>(shape[dim]), blocks = static_cast<std::size_t>(shard.blocks);
  const std::size_t per_block = along / blocks, piece = per_block / static_cast<std::size_t>(shard.parts);
  // The shard is, for each index of the dimensions before `dim`, `blocks` segments of
  // piece * inner elements, each contiguous in the whole tensor.
  const std::size_t segment = piece * inner, shard_row = blocks * segment, whole_row = along * inner;
  std::vector<ShardRun> runs;
  for (std::size_t at = offset, end = offset + count; at < end;) {
    const std::size_t row = at / shard_row, block = at % shard_row / segment, within = at % segment;
    const std::size_t n = std::min(end - at, segment - within);
    const std::size_t whole = row * whole_row +
                              (block * per_block + static_cast<std::size_t>(shard.index) * piece) * inner +
                              within;
    runs.push_back(ShardRun{whole, n, at});
    at += n;
  }
  return runs;
}

}  // namespace troupe
