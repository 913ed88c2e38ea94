// CRC32C (Castagnoli), the checksum the NVMe tier keeps per block: the SSE4.2
// instruction where the CPU has it (several GB/s, so checking a block costs far less
// than reading it), a table otherwise. Same values as iSCSI, ext4 and RocksDB.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe {

/// Extends `crc` (the CRC32C of some bytes) over `bytes` more at `data`:
/// crc32c(b, crc32c(a)) is the CRC32C of a followed by b; crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, std::size_t bytes, uint32_t crc = 0);

}  // namespace troupe
