// Command-line overrides: `--set section.key=value` applied to a parsed document.
//
// Overrides go into the document before conversion, so an overridden value is checked
// exactly like one written in the file, and messages about it name the --set text.
// Internal to the loader (load.cpp).
// Thread safety: pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include <toml++/toml.h>

#include "base/result.hpp"
#include "runtime/config/origins.hpp"

namespace troupe {

/// Applies each override ("batch.micro_batch_size=4", without the "--set") to `root` in
/// order, so a later override of the same key wins. The value is parsed as a TOML value
/// (4, 1e-3, "abc", [0.9, 0.95], true); text that is not valid TOML is taken as a bare
/// string, so cluster.token=abc works. Records "--set <text>" as the origin of each key.
/// Fails with one sentence naming the override when it is malformed or names an unknown
/// section or key.
Status apply_overrides(toml::table& root, const std::vector<std::string>& overrides, ConfigOrigins& origins);

}  // namespace troupe
