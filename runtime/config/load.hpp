// Loading a job configuration from TOML: parse, apply --set overrides, convert, resolve.
//
// The result is a resolved JobConfig (see resolve.hpp) or one sentence that names the file,
// line and column (or the --set text), the [section] key, what was found and what is
// allowed. Every section and key is documented in docs/CONFIG.md.
// Thread safety: pure functions; the file is read once and not kept open.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// Reads the TOML file at `path`, applies `overrides` (each "section.key=value", as given
/// to --set) and resolves the job. JobConfig::source is `path`.
Result<JobConfig> load_config_file(const std::string& path, const std::vector<std::string>& overrides);

/// Like load_config_file for TOML text already in memory; `source_name` stands for the
/// file in messages and becomes JobConfig::source.
Result<JobConfig> load_config_string(std::string_view toml_text, const std::string& source_name,
                                     const std::vector<std::string>& overrides);

}  // namespace troupe
