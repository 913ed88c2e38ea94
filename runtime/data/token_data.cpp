#include "runtime/data/token_data.hpp"

#include <fmt/format.h>

#include "base/check.hpp"
#include "runtime/config/resolve_data.hpp"
#include "runtime/data/splitmix.hpp"

namespace troupe {

Result<TokenData> TokenData::make(const JobConfig& job) {
  TokenData out;
  out.seq_len_ = job.model.seq_len;
  out.seed_ = static_cast<uint64_t>(job.train.seed);
  const std::vector<double> split = data_split(job.data);
  if (job.data.paths.empty()) {
    auto corpus = TextCorpus::make(job.data, job.train.seed, job.model.seq_len);
    if (!corpus) return corpus.error();
    out.byte_parts_ = split_sequences(split, corpus->size());
    out.corpus_ = std::move(corpus).value();
    return out;
  }
  IndexedSamplesOptions o;
  for (const std::string& prefix : job.data.paths) {
    auto dataset = IndexedDataset::open(prefix);
    if (!dataset) return dataset.error();
    o.datasets.push_back(std::move(dataset).value());
  }
  o.weights = job.data.weights;
  o.split = split;
  o.seq_len = job.model.seq_len;
  o.seed = out.seed_;
  o.vocab_size = job.model.vocab_size;
  for (DataPart part : {DataPart::train, DataPart::validation}) {
    if (part == DataPart::validation && !(split.size() > 1 && split[1] > 0)) break;
    o.part = part;
    auto samples = IndexedSamples::make(o);
    if (!samples) return samples.error();
    out.indexed_[static_cast<int>(part)] = std::make_shared<const IndexedSamples>(std::move(samples).value());
  }
  return out;
}

bool TokenData::has_validation() const {
  if (corpus_) {
    const auto [begin, end] = byte_parts_[static_cast<int>(DataPart::validation)];
    return end - begin > seq_len_ + 1;
  }
  return indexed_[static_cast<int>(DataPart::validation)] != nullptr;
}

TokenBatch TokenData::bytes_of(DataPart part, int64_t first, int64_t count) const {
  const auto [begin, end] = byte_parts_[static_cast<int>(part)];
  // The train part keeps the seed's own stream, so a corpus without a split samples as it
  // always has; the validation part draws from a stream of its own.
  const uint64_t seed = part == DataPart::train ? seed_ : splitmix_at(seed_, static_cast<uint64_t>(part));
  return sample_sequences(*corpus_, begin, end, seq_len_, seed, first, count);
}

TokenBatch TokenData::samples(DataPart part, int64_t first, int64_t count) const {
  if (corpus_) return bytes_of(part, first, count);
  const auto& source = indexed_[static_cast<int>(part)];
  TROUPE_CHECK(source != nullptr, "samples of a part the split gives no share");
  auto tokens = torch::empty({count, seq_len_ + 1}, torch::kLong);
  source->fill(first, count, tokens.data_ptr<int64_t>());
  using torch::indexing::Slice;
  return TokenBatch{tokens.index({Slice(), Slice(0, seq_len_)}).contiguous(),
                    tokens.index({Slice(), Slice(1, seq_len_ + 1)}).contiguous()};
}

}  // namespace troupe
