// Writes megatron-core indexed datasets (PREFIX.bin, PREFIX.idx) for tests: one sequence per
// document unless told otherwise, back to back, in the layout runtime/data/indexed_dataset.hpp
// describes. Byte-level edits of the results make the bad inputs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace troupe::testing {

struct IndexedWriter {
  std::string prefix;
  uint8_t dtype_code = 8;  // uint16
  int element_bytes = 2;
  std::vector<int32_t> lengths;
  std::vector<int64_t> document_ends{0};
  std::FILE* bin = nullptr;

  explicit IndexedWriter(std::string p, uint8_t code = 8, int bytes = 2)
      : prefix(std::move(p)), dtype_code(code), element_bytes(bytes) {
    bin = std::fopen((prefix + ".bin").c_str(), "wb");
  }

  /// Appends a sequence of `tokens` (stored as the dataset's dtype, little-endian).
  void add_sequence(const std::vector<int64_t>& tokens) {
    for (int64_t t : tokens) std::fwrite(&t, static_cast<std::size_t>(element_bytes), 1, bin);
    lengths.push_back(static_cast<int32_t>(tokens.size()));
  }
  /// Appends raw token bytes already in the dataset's dtype (large datasets).
  void add_raw(const void* bytes, int64_t tokens) {
    std::fwrite(bytes, static_cast<std::size_t>(element_bytes), static_cast<std::size_t>(tokens), bin);
    lengths.push_back(static_cast<int32_t>(tokens));
  }
  void end_document() { document_ends.push_back(static_cast<int64_t>(lengths.size())); }

  void finish() {
    std::fclose(bin);
    std::FILE* idx = std::fopen((prefix + ".idx").c_str(), "wb");
    std::fwrite("MMIDIDX\0\0", 1, 9, idx);
    const uint64_t version = 1, sequences = lengths.size(), entries = document_ends.size();
    std::fwrite(&version, 8, 1, idx);
    std::fwrite(&dtype_code, 1, 1, idx);
    std::fwrite(&sequences, 8, 1, idx);
    std::fwrite(&entries, 8, 1, idx);
    std::fwrite(lengths.data(), 4, lengths.size(), idx);
    int64_t at = 0;
    for (int32_t n : lengths) {
      std::fwrite(&at, 8, 1, idx);
      at += int64_t{n} * element_bytes;
    }
    std::fwrite(document_ends.data(), 8, document_ends.size(), idx);
    std::fclose(idx);
  }
};

/// Overwrites `bytes` bytes of `path` at `offset` (a bad input from a good one).
inline void patch_file(const std::string& path, long offset, const void* bytes, std::size_t count) {
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  std::fseek(f, offset, SEEK_SET);
  std::fwrite(bytes, 1, count, f);
  std::fclose(f);
}

}  // namespace troupe::testing
