// A deterministic generator of English-like text for runs without a data file.
//
// The text is sentences drawn from a small grammar (subject, verb, object, prepositional
// phrase, an occasional second clause or question) over a fixed vocabulary of about three
// hundred words, with capitals, punctuation and paragraph breaks. It is structured enough
// that a byte-level model learns spelling and word order within a hundred steps, and the
// same (bytes, seed) gives the same text on every machine: it uses only integer hashing,
// never the standard library's implementation-defined distributions.
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

/// Exactly `bytes` bytes of synthetic English-like text determined by `seed`.
std::vector<uint8_t> generate_synthetic_text(int64_t bytes, uint64_t seed);

}  // namespace troupe
