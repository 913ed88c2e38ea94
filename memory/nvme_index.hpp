// The checksums of one key of the NVMe tier: a CRC32C per block of the bytes the caller
// wrote, kept by NvmeStore in memory and in a sidecar file next to the data file
// (`<key>.index`), so that a store reopened on the same directory can verify what it
// reads. A read that does not match names the file, the block's offset and both values.
//
// The sidecar is written to a temporary name and renamed over the old one, so it is
// either the previous index or the new one, never half of each; it is not fsync'ed (the
// tier is swap space, not a checkpoint: after a crash a mismatch is detected, not hidden).
// Thread safety: plain values and free functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

struct KeyIndex {
  uint64_t bytes = 0;       ///< what the caller wrote (the file is padded to whole 4 KiB pages)
  uint32_t block_size = 0;  ///< bytes per checksum; the last block may be shorter
  std::vector<uint32_t> checksums;

  uint64_t blocks() const { return block_size == 0 ? 0 : (bytes + block_size - 1) / block_size; }
  uint64_t block_offset(uint64_t block) const { return block * block_size; }
  uint64_t block_bytes(uint64_t block) const {
    uint64_t end = block_offset(block) + block_size;
    return (end > bytes ? bytes : end) - block_offset(block);
  }
};

/// The sidecar's path for a data file.
inline std::string index_path(const std::string& data_path) {
  return data_path + ".index";
}

/// Writes `index` to `path` (through `path`.tmp and a rename).
Status save_index(const std::string& path, const KeyIndex& index);
/// Reads an index; the error says whether it is missing, unreadable or damaged.
Result<KeyIndex> load_index(const std::string& path);

}  // namespace troupe
