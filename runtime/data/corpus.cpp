#include "runtime/data/corpus.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "base/check.hpp"
#include "runtime/data/splitmix.hpp"
#include "runtime/data/synthetic_text.hpp"

namespace troupe {
namespace {

// One sample needs seq_len input bytes plus the byte after the last one as its target,
// and the start range size - seq_len - 1 must be non-empty.
int64_t min_bytes_for(int64_t seq_len) {
  return seq_len + 2;
}

// C stdio rather than iostreams: libstdc++'s filebuf throws on some read errors (reading
// a directory), and stdio reports every failure through errno instead.
Result<std::vector<uint8_t>> read_bytes(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    return make_error(fmt::format("cannot open data file '{}': {}", path, std::strerror(errno)));
  }
  std::vector<uint8_t> bytes;
  constexpr size_t kChunkBytes = size_t{1} << 20;
  for (;;) {
    const size_t old_size = bytes.size();
    bytes.resize(old_size + kChunkBytes);
    const size_t got = std::fread(bytes.data() + old_size, 1, kChunkBytes, file.get());
    bytes.resize(old_size + got);
    if (got < kChunkBytes) break;
  }
  if (std::ferror(file.get())) {
    return make_error(fmt::format("cannot read data file '{}': {}", path, std::strerror(errno)));
  }
  return bytes;
}

}  // namespace

Result<TextCorpus> TextCorpus::make(const DataConfig& data, int64_t seed, int64_t seq_len) {
  if (seq_len < 1) return make_error(fmt::format("seq_len must be positive, got {}", seq_len));
  const int64_t needed = min_bytes_for(seq_len);
  if (data.path.empty()) {
    if (data.synthetic_bytes < needed) {
      return make_error(
          fmt::format("data.synthetic_bytes = {} is too small: sequences of {} tokens need at least {} bytes",
                      data.synthetic_bytes, seq_len, needed));
    }
    auto bytes = generate_synthetic_text(data.synthetic_bytes, static_cast<uint64_t>(seed));
    return TextCorpus(std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), "synthetic corpus");
  }
  auto bytes = read_bytes(data.path);
  if (!bytes.ok()) return bytes.error();
  const auto size = static_cast<int64_t>(bytes->size());
  if (size < needed) {
    return make_error(
        fmt::format("data file '{}' holds {} bytes: sequences of {} tokens need at least {} bytes", data.path,
                    size, seq_len, needed));
  }
  return TextCorpus(std::make_shared<const std::vector<uint8_t>>(std::move(bytes).value()), data.path);
}

TokenBatch sample_sequences(const TextCorpus& corpus, int64_t seq_len, uint64_t seed, int64_t first_sample,
                            int64_t count) {
  return sample_sequences(corpus, 0, corpus.size(), seq_len, seed, first_sample, count);
}

TokenBatch sample_sequences(const TextCorpus& corpus, int64_t begin, int64_t end, int64_t seq_len,
                            uint64_t seed, int64_t first_sample, int64_t count) {
  TROUPE_CHECK(seq_len >= 1 && count >= 0 && first_sample >= 0, "bad sample range");
  TROUPE_CHECK(0 <= begin && begin <= end && end <= corpus.size(), "byte range outside the corpus");
  TROUPE_CHECK(end - begin >= min_bytes_for(seq_len), "corpus part shorter than one sample");
  const auto starts = static_cast<uint64_t>(end - begin - seq_len - 1);

  auto input = torch::empty({count, seq_len}, torch::kLong);
  auto target = torch::empty({count, seq_len}, torch::kLong);
  int64_t* in = input.data_ptr<int64_t>();
  int64_t* out = target.data_ptr<int64_t>();
  const uint8_t* bytes = corpus.data() + begin;
  for (int64_t j = 0; j < count; ++j) {
    const auto index = static_cast<uint64_t>(first_sample + j);
    const uint8_t* start = bytes + splitmix_at(seed, index) % starts;
    for (int64_t t = 0; t < seq_len; ++t) {
      in[j * seq_len + t] = start[t];
      out[j * seq_len + t] = start[t + 1];
    }
  }
  return TokenBatch{std::move(input), std::move(target)};
}

}  // namespace troupe
