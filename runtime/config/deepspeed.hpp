// DeepSpeed's ds_config.json taken as it is: each key DeepSpeed documents is either
// supported (it becomes the troupe key that does the same, docs/CONFIG.md lists them),
// ignored with a warning (it only tunes something troupe does its own way: logging
// integrations, bucket and contiguity knobs of DeepSpeed's own implementation), or refused.
// Every refused key is named in one message with why, and a value of the wrong JSON type
// is an error naming its key path. What the JSON does not say (the cluster, the model, the
// steps) comes from --set overrides, as for a TOML file; the result goes through the same
// resolution and checks as a TOML job.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/origins.hpp"

namespace troupe {

/// Whether `path` names a DeepSpeed JSON config (it ends in ".json").
bool is_deepspeed_config(std::string_view path);

/// A DeepSpeed config as the troupe keys it sets: a TOML table of sections, each key's
/// origin (its DeepSpeed key path) in `origins`, and the keys ignored in `warnings`.
Result<toml::table> deepspeed_table(std::string_view json_text, const std::string& source_name,
                                    ConfigOrigins& origins, std::vector<std::string>& warnings);

/// A job TOML's `deepspeed_config = "ds_config.json"` (relative to the TOML's folder): the
/// JSON's keys join `root`, which gives the model and the cluster; a key both set is an
/// error naming both places. The pointer itself is removed from `root`.
Status merge_deepspeed_config(toml::table& root, const std::string& toml_source, ConfigOrigins& origins,
                              std::vector<std::string>& warnings);

/// The job a ds_config.json describes, with `overrides` applied; JobConfig::warnings holds
/// the keys ignored. `source_name` stands for the file in messages.
Result<JobConfig> load_deepspeed_string(std::string_view json_text, const std::string& source_name,
                                        const std::vector<std::string>& overrides);

}  // namespace troupe
