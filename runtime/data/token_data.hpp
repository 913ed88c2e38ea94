// The samples of a job's [data], as its ranks, its reference trainer and its profiler read
// them: the train part's endless stream and the validation part's, from a byte corpus
// (corpus.hpp) or megatron-core indexed datasets (indexed_samples.hpp).
//
// Sample i of a part depends only on (the data, [train] seed, the part, i): the global batch
// of step s is train samples [s × G, (s + 1) × G) however dp and the micro-batches split it,
// so a run resumed after step s reads exactly the samples the uninterrupted run read. Every
// validation pass reads validation samples [0, eval_steps × G), the same each time, so its
// losses compare across the run.
// Thread safety: immutable once made; copies share the data and may be used from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/corpus.hpp"
#include "runtime/data/indexed_samples.hpp"

namespace troupe {

class TokenData {
 public:
  /// Opens [data] of `job` (resolved, so its files have been checked once already).
  static Result<TokenData> make(const JobConfig& job);

  /// Samples [first, first + count) of the part as input and target tensors.
  TokenBatch samples(DataPart part, int64_t first, int64_t count) const;
  TokenBatch train(int64_t first, int64_t count) const { return samples(DataPart::train, first, count); }
  /// The validation part's samples; the job's split must give it a share.
  TokenBatch validation(int64_t first, int64_t count) const {
    return samples(DataPart::validation, first, count);
  }
  bool has_validation() const;

 private:
  TokenData() = default;
  TokenBatch bytes_of(DataPart part, int64_t first, int64_t count) const;

  int64_t seq_len_ = 1;
  uint64_t seed_ = 0;
  std::optional<TextCorpus> corpus_;
  std::array<std::pair<int64_t, int64_t>, 3> byte_parts_{};       // of corpus_, by part
  std::array<std::shared_ptr<const IndexedSamples>, 3> indexed_;  // by part; null = none
};

}  // namespace troupe
