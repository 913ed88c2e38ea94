#include "runtime/data/indexed_dataset.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "base/check.hpp"

namespace troupe {
namespace {

constexpr std::array<char, 9> kMagic = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr int64_t kChunk = int64_t{1} << 16;  // index entries checked at a time

// Byte size of each token dtype code; 0 for a code that is not megatron-core's.
int size_of_code(uint8_t code) {
  static constexpr std::array<int, 9> sizes = {0, 1, 1, 2, 4, 8, 8, 4, 2};
  return code < sizes.size() ? sizes[code] : 0;
}

template <class T>
T read_value(const MappedFile& file, int64_t offset) {
  T value{};
  file.read(offset, sizeof(T), &value);
  return value;
}

template <class T>
void read_array(const MappedFile& file, int64_t offset, int64_t count, std::vector<T>& out) {
  out.resize(static_cast<size_t>(count));
  file.read(offset, count * static_cast<int64_t>(sizeof(T)), out.data());
}

// The counts the header claims, checked against the index's size: a multimodal index adds a
// mode byte per sequence.
Status check_index_size(const MappedFile& idx, int64_t sequences, int64_t entries) {
  const int64_t plain = kHeaderBytes + sequences * 12 + entries * 8;
  if (sequences < 0 || entries < 1 || sequences > (int64_t{1} << 40) || entries > (int64_t{1} << 40) ||
      (idx.size() != plain && idx.size() != plain + sequences)) {
    return make_error(fmt::format(
        "index '{}' claims {} sequences and {} document indices, which take {} bytes, but the file holds {}",
        idx.path(), sequences, entries, sequences >= 0 && entries >= 0 ? plain : -1, idx.size()));
  }
  return {};
}

// Lengths and pointers, a chunk at a time: each sequence starts where the one before it
// ended (as megatron-core's builder writes them), so a token position is a byte offset.
Result<int64_t> check_sequences(const MappedFile& idx, int64_t sequences, int element_bytes) {
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  int64_t expected = 0;
  for (int64_t first = 0; first < sequences; first += kChunk) {
    const int64_t n = std::min(kChunk, sequences - first);
    read_array(idx, kHeaderBytes + first * 4, n, lengths);
    read_array(idx, kHeaderBytes + sequences * 4 + first * 8, n, pointers);
    for (int64_t k = 0; k < n; ++k) {
      const auto i = static_cast<size_t>(k);
      if (lengths[i] < 0)
        return make_error(
            fmt::format("index '{}': sequence {} has length {}, below 0", idx.path(), first + k, lengths[i]));
      if (pointers[i] != expected)
        return make_error(fmt::format(
            "index '{}': sequence {} starts at byte {} of the .bin, but the sequences before it end at byte "
            "{} (megatron-core's builder writes them back to back)",
            idx.path(), first + k, pointers[i], expected));
      expected += int64_t{lengths[i]} * element_bytes;
    }
  }
  return expected;
}

Status check_documents(const MappedFile& idx, int64_t sequences, int64_t entries) {
  std::vector<int64_t> ends;
  int64_t previous = 0;
  const int64_t at = kHeaderBytes + sequences * 12;
  for (int64_t first = 0; first < entries; first += kChunk) {
    const int64_t n = std::min(kChunk, entries - first);
    read_array(idx, at + first * 8, n, ends);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t end = ends[static_cast<size_t>(k)];
      const bool bad = (first + k == 0) ? end != 0 : (end < previous || end > sequences);
      if (bad)
        return make_error(fmt::format(
            "index '{}': document index {} is {}; they must start at 0 and rise to the sequence count {}",
            idx.path(), first + k, end, sequences));
      previous = end;
    }
  }
  if (previous != sequences)
    return make_error(
        fmt::format("index '{}': its last document ends at sequence {}, not at the last one ({})", idx.path(),
                    previous, sequences));
  return {};
}

}  // namespace

const char* name_of(TokenType type) {
  switch (type) {
    case TokenType::u8:
      return "uint8";
    case TokenType::i8:
      return "int8";
    case TokenType::i16:
      return "int16";
    case TokenType::i32:
      return "int32";
    case TokenType::i64:
      return "int64";
    case TokenType::f64:
      return "float64";
    case TokenType::f32:
      return "float32";
    case TokenType::u16:
      return "uint16";
  }
  return "unknown";
}

namespace {

// The files' identity: a dataset checked once in this process (by the config's resolution)
// is not streamed through again (by the rank's loader) while its files stay as they were.
std::string identity_of(const std::string& prefix) {
  std::string id;
  for (const char* suffix : {".idx", ".bin"}) {
    struct stat st {};
    if (::stat((prefix + suffix).c_str(), &st) != 0) return "";
    id += fmt::format("{}:{}:{}:{}.{};", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                      st.st_mtim.tv_nsec);
  }
  return id;
}

std::mutex opened_mutex;
std::map<std::string, std::pair<std::string, std::shared_ptr<const IndexedDataset>>> opened;  // by prefix

}  // namespace

Result<std::shared_ptr<const IndexedDataset>> IndexedDataset::open(const std::string& prefix) {
  const std::string identity = identity_of(prefix);
  {
    std::lock_guard<std::mutex> lock(opened_mutex);
    auto found = opened.find(prefix);
    if (!identity.empty() && found != opened.end() && found->second.first == identity)
      return found->second.second;
  }
  auto made = check_and_open(prefix);
  if (made && !identity.empty()) {
    std::lock_guard<std::mutex> lock(opened_mutex);
    opened[prefix] = {identity, *made};
  }
  return made;
}

Result<std::shared_ptr<const IndexedDataset>> IndexedDataset::check_and_open(const std::string& prefix) {
  auto idx = MappedFile::open(prefix + ".idx");
  if (!idx) return make_error(fmt::format("indexed dataset '{}': {}", prefix, idx.error().message));
  const MappedFile& index = **idx;
  std::array<char, 9> magic{};
  if (index.size() < kHeaderBytes || (index.read(0, 9, magic.data()), magic != kMagic))
    return make_error(fmt::format(
        "'{}' is not a megatron-core index: it does not start with \"MMIDIDX\" and its 34-byte header",
        index.path()));
  if (const auto version = read_value<uint64_t>(index, 9); version != 1)
    return make_error(
        fmt::format("index '{}' is version {} of the format; troupe reads version 1", index.path(), version));
  const auto code = read_value<uint8_t>(index, 17);
  const int bytes = size_of_code(code);
  if (bytes == 0 || code == 6 || code == 7)
    return make_error(fmt::format(
        "index '{}' has token dtype code {}{}; token ids must be one of uint8, int8, int16, uint16, int32 or "
        "int64",
        index.path(), code, bytes == 0 ? "" : fmt::format(" ({})", name_of(static_cast<TokenType>(code)))));
  const auto sequences = static_cast<int64_t>(read_value<uint64_t>(index, 18));
  const auto entries = static_cast<int64_t>(read_value<uint64_t>(index, 26));
  TROUPE_TRY(check_index_size(index, sequences, entries));
  auto end = check_sequences(index, sequences, bytes);
  if (!end) return end.error();
  TROUPE_TRY(check_documents(index, sequences, entries));

  auto bin = MappedFile::open(prefix + ".bin");
  if (!bin) return make_error(fmt::format("indexed dataset '{}': {}", prefix, bin.error().message));
  if ((*bin)->size() != *end)
    return make_error(fmt::format(
        "data file '{}' holds {} bytes, but its index '{}' describes {} ({} tokens of {})", (*bin)->path(),
        (*bin)->size(), index.path(), *end, *end / bytes, name_of(static_cast<TokenType>(code))));
  std::shared_ptr<IndexedDataset> dataset(new IndexedDataset());
  dataset->prefix_ = prefix;
  dataset->index_ = std::move(idx).value();
  dataset->bin_ = std::move(bin).value();
  dataset->type_ = static_cast<TokenType>(code);
  dataset->element_bytes_ = bytes;
  dataset->sequences_ = sequences;
  dataset->documents_ = entries - 1;
  dataset->tokens_ = *end / bytes;
  dataset->pointers_at_ = kHeaderBytes + sequences * 4;
  return std::shared_ptr<const IndexedDataset>(std::move(dataset));
}

int64_t IndexedDataset::sequence_start(int64_t i) const {
  TROUPE_CHECK(i >= 0 && i <= sequences_, "sequence index out of range");
  if (i == sequences_) return tokens_;
  return read_value<int64_t>(*index_, pointers_at_ + i * 8) / element_bytes_;
}

namespace {

template <class T>
void widen(const std::byte* from, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, from + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    out[i] = static_cast<int64_t>(value);
  }
}

}  // namespace

void IndexedDataset::read(int64_t position, int64_t count, int64_t* out) const {
  TROUPE_CHECK(position >= 0 && count >= 0 && position <= tokens_ - count, "tokens outside the dataset");
  thread_local std::vector<std::byte> raw;
  raw.resize(static_cast<size_t>(count * element_bytes_));
  bin_->read(position * element_bytes_, count * element_bytes_, raw.data());
  switch (type_) {
    case TokenType::u8:
      return widen<uint8_t>(raw.data(), count, out);
    case TokenType::i8:
      return widen<int8_t>(raw.data(), count, out);
    case TokenType::i16:
      return widen<int16_t>(raw.data(), count, out);
    case TokenType::u16:
      return widen<uint16_t>(raw.data(), count, out);
    case TokenType::i32:
      return widen<int32_t>(raw.data(), count, out);
    case TokenType::i64:
      return widen<int64_t>(raw.data(), count, out);
    case TokenType::f32:
    case TokenType::f64:
      break;
  }
  TROUPE_CHECK(false, "float token type reached read()");
}

}  // namespace troupe
