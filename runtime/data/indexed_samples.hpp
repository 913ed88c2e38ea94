// GPT training samples from megatron-core indexed datasets: the split, the shuffled windows
// and the blend of `[data] paths`.
//
// Each dataset's sequences are split into train, validation and test parts as megatron-core
// does (split "969,30,1" normalised into book-ends; part p holds sequences
// [round(lo × S), round(hi × S)), rounding half to even). Within a part the sequences are
// read as one stream of tokens across document boundaries, cut into windows of seq_len + 1
// tokens that overlap by one (input and target of one sample), as megatron-core's
// GPTDataset does: T tokens give (T − 1) / seq_len samples an epoch. Each epoch visits them
// in a fresh seeded order (permutation.hpp). megatron-core also shuffles the documents
// before cutting; that needs a table per document, so here documents stay in file order and
// the windows are shuffled instead, and the loader holds no table at all.
// Several datasets are blended by weight (blend.hpp); no weights: each in proportion to
// its part's tokens.
// Thread safety: immutable once made; fill() from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "runtime/data/blend.hpp"
#include "runtime/data/indexed_dataset.hpp"

namespace troupe {

enum class DataPart { train = 0, validation = 1, test = 2 };

const char* name_of(DataPart part);

/// megatron-core's split: `split` (1 to 3 shares, each >= 0, sum > 0) of `sequences`.
std::array<std::pair<int64_t, int64_t>, 3> split_sequences(const std::vector<double>& split,
                                                           int64_t sequences);

struct IndexedSamplesOptions {
  std::vector<std::shared_ptr<const IndexedDataset>> datasets;
  std::vector<double> weights;  ///< one per dataset; empty = by the part's tokens
  std::vector<double> split;    ///< train, validation, test shares
  DataPart part = DataPart::train;
  int64_t seq_len = 1;
  uint64_t seed = 0;
  int64_t vocab_size = 0;  ///< every token read must be below it
};

class IndexedSamples {
 public:
  /// Fails naming the dataset when its part of the split is shorter than one sample.
  static Result<IndexedSamples> make(IndexedSamplesOptions options);

  int64_t seq_len() const { return seq_len_; }
  /// Samples [first, first + count) of the endless stream, seq_len + 1 tokens each, into
  /// `tokens`. Throws std::runtime_error naming the dataset and position of a token that is
  /// negative or not below vocab_size.
  void fill(int64_t first, int64_t count, int64_t* tokens) const;

  /// Per dataset: the part's first token and its samples an epoch (for `troupe data`).
  struct Source {
    std::shared_ptr<const IndexedDataset> dataset;
    int64_t first_token = 0;
    int64_t tokens = 0;
    int64_t samples = 0;  ///< an epoch
  };
  const std::vector<Source>& sources() const { return sources_; }
  const Blend& blend() const { return *blend_; }

 private:
  IndexedSamples() = default;
  void fill_one(const Source& source, std::size_t which, int64_t index, int64_t* out) const;

  std::vector<Source> sources_;
  std::shared_ptr<const Blend> blend_;
  int64_t seq_len_ = 1;
  uint64_t seed_ = 0;
  int64_t vocab_size_ = 0;
  DataPart part_ = DataPart::train;
};

}  // namespace troupe
