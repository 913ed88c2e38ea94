// Comparing secrets without telling how much of a guess was right: the time taken depends
// on the lengths only, never on where the first difference is.
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace troupe {

/// Whether a == b, reading every byte of the longer one whatever they hold.
inline bool constant_time_equal(std::string_view a, std::string_view b) {
  const std::size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned difference = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<unsigned>(x ^ y);
  }
  // Read through a volatile so the loop is not cut short once a difference is known.
  volatile unsigned result = difference;
  return result == 0;
}

}  // namespace troupe
