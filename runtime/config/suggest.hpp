// Did-you-mean for configuration names: the closest known word to a misspelt one.
//
// A typo in a key, a section or an enum value is the most common configuration error;
// naming the intended word turns a lookup in the docs into a one-character fix.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// The number of single-character insertions, deletions, substitutions and swaps of
/// adjacent characters that turn `a` into `b` (optimal string alignment distance), so a
/// swapped pair such as "gtp" for "gpt" counts as one typo, not two.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word` when it is close enough to be a typo of it (at most
/// two edits, and at most a third of `word`, so short words are not matched to anything);
/// nullopt otherwise. Ties go to the earlier candidate.
std::optional<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace troupe
