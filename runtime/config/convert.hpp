// From a parsed TOML document to a JobConfig: names and types, not ranges.
//
// This is the half of loading that needs the document: it rejects unknown sections and
// keys (with a did-you-mean), rejects values of the wrong TOML type, and records where
// each value sits so that resolve_config can point at it later. Ranges and relations
// between keys are resolve_config's job, because configs built in code need them too.
// Internal to the loader (load.cpp, override.cpp).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/origins.hpp"

namespace troupe {

/// Parses TOML text. A syntax error becomes one sentence with toml++'s description and
/// the position: "job.toml:2:10: invalid TOML: error while parsing ...".
Result<toml::table> parse_toml(std::string_view text, const std::string& source_name);

/// A value as the user wrote it, with its kind: `"four" (a string)`, `2.5 (a float)`.
std::string describe_value(const toml::node& node);

/// The defaults of JobConfig overwritten by every key of `root` (source = origins.source).
/// Fails on the first unknown section, unknown key or value of the wrong type, in file
/// order. Adds to `origins` the position of every value read; entries already there
/// (from --set overrides) are kept and used in messages instead of positions.
Result<JobConfig> table_to_config(const toml::table& root, ConfigOrigins& origins);

}  // namespace troupe
