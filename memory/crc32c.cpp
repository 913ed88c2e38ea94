#include "memory/crc32c.hpp"

#include <array>
#include <cstring>

namespace troupe {
namespace {

constexpr uint32_t castagnoli_reflected = 0x82F63B78u;

// table[k][b]: the CRC of byte b followed by k zero bytes (slicing by 8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? castagnoli_reflected : 0);
    t[0][b] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}

uint32_t update_table(uint32_t c, const unsigned char* p, std::size_t n) {
  static const Tables t = make_tables();
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian, as the reflected CRC wants
    word ^= c;
    c = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^ t[4][(word >> 24) & 0xFF] ^
        t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^ t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t c, const unsigned char* p, std::size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = __builtin_ia32_crc32qi(c, *p);
  return c;
}

bool have_sse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, std::size_t bytes, uint32_t crc) {
  auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (have_sse42()) return ~update_sse42(~crc, p, bytes);
#endif
  return ~update_table(~crc, p, bytes);
}

}  // namespace troupe
