// The configuration vocabulary: every section, every key, its field in JobConfig and the
// sentence that says which values it accepts.
//
// One table serves the loader (which keys exist, where each value goes, what a type error
// says), the validator (what a range error says) and the renderer (what to print), so a new
// key is added in one place and every path learns about it.
// Thread safety: the table is immutable; all functions are pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/config/choices.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// Both Adam betas, which TOML spells as one key: betas = [beta1, beta2].
struct BetasRef {
  double* beta1;
  double* beta2;
};

/// [batch] micro_batch_size: an integer, or "auto".
struct MicroBatchRef {
  int64_t* size;
  bool* automatic;
};

/// A pointer to the field one key fills; the alternative says the key's TOML type.
using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, ChoiceRef, BetasRef, PipelinePartition*,
                              MicroBatchRef, std::vector<std::string>*, std::vector<double>*>;

/// One key of one section.
struct KeySpec {
  std::string_view section;
  std::string_view key;
  /// What the key accepts, phrased to follow "must be", e.g. "a positive integer".
  std::string_view expect;
  /// The key's field inside `config`.
  FieldRef (*field)(JobConfig& config);
  /// A secret (the job token): its value is never shown, in a message, a --set label or a
  /// rendered config; only its kind or length.
  bool secret = false;
};

/// Every key, grouped by section in the order of config.hpp.
const std::vector<KeySpec>& key_specs();

/// The section names in order: cluster, parallel, batch, ...
const std::vector<std::string>& section_names();

/// The key names of `section` in order; empty for an unknown section.
std::vector<std::string> key_names(std::string_view section);

/// The spec of section.key, or nullptr when there is no such key.
const KeySpec* find_key(std::string_view section, std::string_view key);

/// What `section.key` accepts (its KeySpec::expect). The key must exist.
std::string_view expect_of(std::string_view section, std::string_view key);

/// "unknown section [clustr]; did you mean [cluster]?", or the list of sections when no
/// name is close. No location prefix.
std::string unknown_section_message(std::string_view section);

/// "unknown key [batch] micro_bach_size; did you mean micro_batch_size?"; names the right
/// section when the key belongs to another one, else lists the section's keys.
std::string unknown_key_message(std::string_view section, std::string_view key);

}  // namespace troupe
