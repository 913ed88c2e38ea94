// Where each configuration value came from, so an error found after loading still points
// at the line (or the --set override) the user has to change.
//
// The loader fills one entry per key it read; a config built in code has none, and
// errors then name the config's source and the key.
// Thread safety: plain values.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "base/result.hpp"

namespace troupe {

/// Locations of the keys of one JobConfig, as message prefixes.
struct ConfigOrigins {
  /// Used for keys without an entry: the file name, or "<struct>".
  std::string source;
  /// "section.key" -> "job.toml:3:20" (the value's position) or "--set batch.steps=4".
  std::map<std::string, std::string> by_key;

  /// The prefix for messages about section.key, without the trailing ": ".
  std::string where(std::string_view section, std::string_view key) const {
    auto it = by_key.find(fmt::format("{}.{}", section, key));
    return it == by_key.end() ? source : it->second;
  }
};

/// "<where>: [section] <message>", where is the key's origin.
inline Error key_error(const ConfigOrigins& origins, std::string_view section, std::string_view key,
                       const std::string& message) {
  return make_error(fmt::format("{}: [{}] {}", origins.where(section, key), section, message));
}

}  // namespace troupe
