// The rest of DeepSpeed's config schema: every key of DeepSpeed's current ds_config that
// troupe does not convert into one of its own (deepspeed.cpp has those), with what troupe
// does with it and why. Keys are paths ("zero_optimization.offload_optimizer.pipeline_read");
// a path ending in '.' stands for everything under it. A key in none of the lists is one
// DeepSpeed would not know either, and gets a did-you-mean against all of them.
// Thread safety: immutable tables.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

struct DeepSpeedRule {
  enum class Kind {
    ignore,         ///< accepted with a warning that says why it changes nothing here
    quiet,          ///< accepted without a word: a setting of a feature the config leaves off
    refuse,         ///< refused with `why`
    refuse_unless,  ///< accepted silently when its value is `fine` (JSON text), refused otherwise
  };
  std::string_view path;
  Kind kind;
  std::string_view why;
  std::string_view fine = "";
};

/// The rule for `path`: its own, or the nearest section rule above it; null for none.
const DeepSpeedRule* deepspeed_rule(std::string_view path);

/// The key paths of DeepSpeed's schema, for did-you-mean (sections without their '.').
const std::vector<std::string>& deepspeed_schema_paths();

/// For a key Hugging Face's integration writes as "auto" that troupe fills from the job:
/// the troupe key whose value it takes (the job's, or its default); nullopt otherwise.
std::optional<std::string_view> auto_from_job(std::string_view path);

}  // namespace troupe
