// Rendering a JobConfig as TOML: what the job will actually run with.
//
// The output lists every section and every key, including the values resolve_config
// derived, with a comment on each derived relation (e.g. "# derived: global = micro 4 ×
// accumulation 1 × dp 2"). It is valid TOML that loads back to an equal config, so a
// rendered config can be saved next to a run's results and replayed.
// Thread safety: a pure function.
#pragma once

#include <string>

#include "runtime/config/config.hpp"

namespace troupe {

/// The config as TOML text. Meant for resolved configs; an unresolved one is printed as
/// it is (its derived comments may then not add up). cluster.token is a secret: a set
/// token is shown as a comment with its length only, so the text loads without it.
std::string render_config(const JobConfig& config);

}  // namespace troupe
