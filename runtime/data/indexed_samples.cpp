#include "runtime/data/indexed_samples.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "base/check.hpp"
#include "runtime/data/permutation.hpp"
#include "runtime/data/splitmix.hpp"

namespace troupe {

const char* name_of(DataPart part) {
  switch (part) {
    case DataPart::train:
      return "train";
    case DataPart::validation:
      return "validation";
    case DataPart::test:
      return "test";
  }
  return "?";
}

std::array<std::pair<int64_t, int64_t>, 3> split_sequences(const std::vector<double>& split,
                                                           int64_t sequences) {
  TROUPE_CHECK(!split.empty() && split.size() <= 3, "a split of 1 to 3 shares");
  double sum = 0;
  for (double share : split) sum += share;
  TROUPE_CHECK(sum > 0, "a split whose shares sum to zero");
  std::array<std::pair<int64_t, int64_t>, 3> parts{};
  double low = 0;
  for (std::size_t p = 0; p < 3; ++p) {
    const double high = low + (p < split.size() ? split[p] / sum : 0.0);
    // Python's round(): half to even, which nearbyint does in the default rounding mode.
    parts[p] = {static_cast<int64_t>(std::nearbyint(low * static_cast<double>(sequences))),
                static_cast<int64_t>(std::nearbyint(high * static_cast<double>(sequences)))};
    low = high;
  }
  return parts;
}

Result<IndexedSamples> IndexedSamples::make(IndexedSamplesOptions o) {
  TROUPE_CHECK(!o.datasets.empty() && o.seq_len >= 1, "indexed samples of nothing");
  IndexedSamples out;
  out.seq_len_ = o.seq_len;
  out.seed_ = o.seed;
  out.vocab_size_ = o.vocab_size;
  out.part_ = o.part;
  std::vector<double> weights = o.weights;
  const bool by_size = weights.empty();
  for (std::size_t k = 0; k < o.datasets.size(); ++k) {
    const auto& dataset = o.datasets[k];
    const auto [begin, end] = split_sequences(o.split, dataset->sequence_count())[static_cast<int>(o.part)];
    Source s{dataset, dataset->sequence_start(begin), 0, 0};
    s.tokens = dataset->sequence_start(end) - s.first_token;
    s.samples = s.tokens > 0 ? (s.tokens - 1) / o.seq_len : 0;
    if (by_size) weights.push_back(static_cast<double>(s.tokens));
    if (s.samples < 1)
      return make_error(
          fmt::format("dataset '{}': its {} part (sequences {} to {} of {}, {} tokens, by [data] split) is "
                      "shorter than one "
                      "sample of seq_len + 1 = {} tokens",
                      dataset->prefix(), name_of(o.part), begin, end, dataset->sequence_count(), s.tokens,
                      o.seq_len + 1));
    out.sources_.push_back(std::move(s));
  }
  out.blend_ = std::make_shared<const Blend>(std::move(weights));
  return out;
}

void IndexedSamples::fill_one(const Source& s, std::size_t which, int64_t index, int64_t* out) const {
  const auto samples = static_cast<uint64_t>(s.samples);
  const auto epoch = static_cast<uint64_t>(index) / samples;
  // One order per (seed, part, dataset, epoch).
  const uint64_t key = splitmix_at(splitmix_at(seed_, static_cast<uint64_t>(part_) * 1024 + which), epoch);
  const uint64_t window = Permutation(samples, key)(static_cast<uint64_t>(index) % samples);
  const int64_t position = s.first_token + static_cast<int64_t>(window) * seq_len_;
  s.dataset->read(position, seq_len_ + 1, out);
  for (int64_t t = 0; t <= seq_len_; ++t) {
    if (out[t] < 0 || out[t] >= vocab_size_)
      throw std::runtime_error(fmt::format(
          "dataset '{}': token {} of the .bin is {}, outside the model's vocabulary (vocab_size = {})",
          s.dataset->prefix(), position + t, out[t], vocab_size_));
  }
}

void IndexedSamples::fill(int64_t first, int64_t count, int64_t* tokens) const {
  for (int64_t j = 0; j < count; ++j) {
    const Blend::Pick pick = blend_->at(first + j);
    const auto which = static_cast<std::size_t>(pick.dataset);
    fill_one(sources_[which], which, pick.index, tokens + j * (seq_len_ + 1));
  }
}

}  // namespace troupe
