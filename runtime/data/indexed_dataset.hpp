// Megatron-core's indexed dataset: PREFIX.bin holds every token back to back, PREFIX.idx
// says how they divide into sequences and documents.
//
// The .idx, little-endian, as megatron-core's IndexedDatasetBuilder writes it:
//   "MMIDIDX\0\0", version u64 = 1, token dtype code u8 (1 uint8, 2 int8, 3 int16,
//   4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), sequence count u64 (S), document
//   count u64 (D), then int32 lengths[S] (tokens), int64 pointers[S] (byte offsets into
//   the .bin), int64 document_indices[D] (0, then the sequence index after each document),
//   and for a multimodal dataset int8 modes[S].
// open() checks every claim of the index against the two files, streaming through the
// index, so a dataset far larger than memory opens in a few MB; tokens are then read on
// demand from the mapped .bin (mapped_file.hpp).
// Thread safety: immutable once opened; read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.hpp"
#include "runtime/data/mapped_file.hpp"

namespace troupe {

/// The token dtype codes of megatron-core's DType.
enum class TokenType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

/// "uint16", "int32", ...
const char* name_of(TokenType type);

class IndexedDataset {
 public:
  /// Opens PREFIX.idx and PREFIX.bin. Fails with a sentence naming the file, and the offset
  /// or sequence, when the index is not version 1 of the format, its token type is not an
  /// integer, its counts do not match its size, a sequence does not start where the one
  /// before it ends, its document indices are not 0 ... S in order, or the .bin holds a
  /// different number of bytes than the index describes. A dataset opened before in this
  /// process, whose files are unchanged, is returned as it is, not checked again.
  static Result<std::shared_ptr<const IndexedDataset>> open(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  TokenType type() const { return type_; }
  int element_bytes() const { return element_bytes_; }
  int64_t sequence_count() const { return sequences_; }
  int64_t document_count() const { return documents_; }
  int64_t token_count() const { return tokens_; }

  /// Where sequence `i` starts, in tokens from the start of the .bin; i = sequence_count()
  /// gives token_count().
  int64_t sequence_start(int64_t i) const;
  /// Tokens [position, position + count) of the .bin, widened to int64.
  void read(int64_t position, int64_t count, int64_t* out) const;

 private:
  IndexedDataset() = default;
  static Result<std::shared_ptr<const IndexedDataset>> check_and_open(const std::string& prefix);

  std::string prefix_;
  std::shared_ptr<const MappedFile> index_, bin_;
  TokenType type_ = TokenType::u16;
  int element_bytes_ = 2;
  int64_t sequences_ = 0, documents_ = 0, tokens_ = 0;
  int64_t pointers_at_ = 0;  // byte offset of pointers[0] in the .idx
};

}  // namespace troupe
