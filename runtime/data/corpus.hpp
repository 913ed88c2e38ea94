// The byte-level training data: a corpus of bytes and the endless stream of samples drawn
// from it.
//
// Every token is one byte (vocab 256). Sample i of the stream (a global index, counted
// across all steps and ranks) is the seq_len + 1 bytes starting at a position that depends
// only on (seed, i), so the global batch of step s is samples [s × G, (s + 1) × G) however
// the job splits it into ranks and micro-batches.
// Thread safety: a TextCorpus is immutable once made; copies share the bytes and may be
// used from any thread.
// Invariants: size() >= seq_len + 2 for the seq_len the corpus was made for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "base/result.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// An immutable run of bytes, read from a file or generated; copies are cheap.
class TextCorpus {
 public:
  /// Reads data.path as raw bytes, or generates data.synthetic_bytes of English-like text
  /// from `seed` when the path is empty. Fails with a sentence naming the path when the
  /// file cannot be read or holds too few bytes for one sample of `seq_len` tokens.
  static Result<TextCorpus> make(const DataConfig& data, int64_t seed, int64_t seq_len = 1);

  const uint8_t* data() const { return bytes_->data(); }
  int64_t size() const { return static_cast<int64_t>(bytes_->size()); }
  /// The file the bytes came from, or "synthetic corpus" (for messages).
  const std::string& source() const { return source_; }

 private:
  TextCorpus(std::shared_ptr<const std::vector<uint8_t>> bytes, std::string source)
      : bytes_(std::move(bytes)), source_(std::move(source)) {}

  std::shared_ptr<const std::vector<uint8_t>> bytes_;
  std::string source_;
};

/// A micro-batch of samples: input and target are int64 [count, seq_len], and
/// target[j][t] == input[j][t + 1] for t < seq_len - 1 (the next byte of the corpus).
struct TokenBatch {
  torch::Tensor input;
  torch::Tensor target;
};

/// Samples [first_sample, first_sample + count) of the stream named by `seed`. Sample i
/// starts at splitmix_at(seed, i) mod (size - seq_len - 1). The corpus must have been made
/// for at least this seq_len.
TokenBatch sample_sequences(const TextCorpus& corpus, int64_t seq_len, uint64_t seed, int64_t first_sample,
                            int64_t count);

/// The same over bytes [begin, end) of the corpus (a part of [data] split): sample i starts
/// at begin + splitmix_at(seed, i) mod (end - begin - seq_len - 1).
TokenBatch sample_sequences(const TextCorpus& corpus, int64_t begin, int64_t end, int64_t seq_len,
                            uint64_t seed, int64_t first_sample, int64_t count);

}  // namespace troupe
