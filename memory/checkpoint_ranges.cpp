#include "memory/checkpoint_ranges.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace troupe {
namespace {

// By parameter: its saved ranges, by first element; on equal starts the first listed.
using Index = std::map<std::string, std::vector<const SavedRange*>>;

Index index_of(const std::vector<SavedRange>& saved) {
  Index index;
  for (const SavedRange& s : saved)
    if (s.count > 0) index[s.parameter].push_back(&s);
  for (auto& [name, ranges] : index) {
    (void)name;
    std::stable_sort(ranges.begin(), ranges.end(),
                     [](const SavedRange* a, const SavedRange* b) { return a->offset < b->offset; });
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
    if (found != index.end())
      for (const SavedRange* s : found->second) {
        if (next >= end) break;
        const std::size_t s_end = s->offset + s->count;
        if (s_end <= next || s->offset > next) continue;  // before what is needed, or leaves a gap
        const std::size_t n = std::min(end, s_end) - next;
        append(reads, RangeRead{s->file, s->at + (next - s->offset), n, w.into + (next - w.offset)});
        next += n;
      }
    if (next < end)
      return make_error(
          fmt::format("the checkpoint holds no value for elements [{}, {}) of parameter '{}': it "
                      "was saved from another model, or is incomplete",
                      next, end, w.parameter));
  }
  return reads;
}

}  // namespace troupe
