// Blending several datasets by weight, as megatron-core's BlendedDataset draws them.
//
// Sample i of the blend comes from the dataset whose share is furthest behind its weight:
// the k maximising weight[k] × max(i, 1) − taken[k] (the lowest k on a tie), which then
// takes its next sample. That is megatron-core's build_blending_indices, so a blend of the
// same weights picks the same dataset for every sample, and any prefix of the stream is
// within one sample per dataset of the requested mix. Megatron keeps the whole pick table
// in memory; this keeps the running counts every 4096 samples and walks from the nearest
// one, so any sample of an endless stream is found in bounded memory and time.
// Thread safety: at() may be called from any thread (a mutex guards its cache).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace troupe {

class Blend {
 public:
  /// `weights` are normalised here; at least one, each finite and >= 0, sum > 0 (a bug
  /// otherwise: the config checks them).
  explicit Blend(std::vector<double> weights);

  struct Pick {
    int dataset = 0;
    int64_t index = 0;  ///< how many samples this dataset gave before this one
  };
  /// Which dataset gives sample `i` of the blend, and its how-many-th sample it is.
  Pick at(int64_t i) const;

  const std::vector<double>& weights() const { return weights_; }

 private:
  static constexpr int64_t kStride = 4096;

  // Advances `counts` (the counts before sample `from`) to those before sample `to`.
  void walk(std::vector<int64_t>& counts, int64_t from, int64_t to) const;
  int choose(const std::vector<int64_t>& counts, int64_t i) const;

  std::vector<double> weights_;
  mutable std::mutex mutex_;
  mutable std::vector<std::vector<int64_t>> marks_;  // counts before sample k × kStride
  mutable int64_t cursor_at_ = 0;                    // the last sample looked up, and
  mutable std::vector<int64_t> cursor_;              // the counts before it
};

}  // namespace troupe
