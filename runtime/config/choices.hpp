// Keys whose value is one of a few names: the enums of config.hpp and their TOML spellings.
//
// A job holds these as enums from the moment it is loaded, so a misspelt tier or dtype is
// refused by the loader (naming the file, line and key, with a did-you-mean), and the code
// that reads a job compares enums, never strings. choice_names<E>() lists E's spellings
// by the enum's underlying value; name_of() gives one back for messages and rendering.
// Thread safety: the name tables are immutable.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.hpp"
#include "runtime/config/config.hpp"

namespace troupe {

/// The TOML spellings of E's values, indexed by the enum's underlying value.
template <class E>
const std::vector<std::string>& choice_names();

template <>
const std::vector<std::string>& choice_names<DeviceKind>();
template <>
const std::vector<std::string>& choice_names<Topology>();
template <>
const std::vector<std::string>& choice_names<pipeline::GridOrder>();
template <>
const std::vector<std::string>& choice_names<PartitionMethod>();
template <>
const std::vector<std::string>& choice_names<OffloadTier>();
template <>
const std::vector<std::string>& choice_names<DirectIo>();
template <>
const std::vector<std::string>& choice_names<OptimizerType>();
template <>
const std::vector<std::string>& choice_names<Dtype>();
template <>
const std::vector<std::string>& choice_names<LrScheduleType>();
template <>
const std::vector<std::string>& choice_names<WarmupType>();

/// E's TOML spelling, e.g. name_of(OffloadTier::nvme) == "nvme".
template <class E>
const std::string& name_of(E value) {
  const auto& names = choice_names<E>();
  const auto index = static_cast<std::size_t>(value);
  TROUPE_CHECK(index < names.size(), "an enum value without its name in choices.cpp");
  return names[index];
}

/// The value spelt `name`, or nullopt.
template <class E>
std::optional<E> parse_choice(std::string_view name) {
  const auto& names = choice_names<E>();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

/// One key's enum field, type-erased for the key table (schema.hpp): an index into `names`.
/// An optional enum's index 0 is "" (unset), its values one up.
struct ChoiceRef {
  void* field;
  std::size_t (*get)(const void* field);
  void (*set)(void* field, std::size_t index);
  const std::vector<std::string>* names;
};

template <class E>
ChoiceRef choice_ref(E* field) {
  return {field, [](const void* f) { return static_cast<std::size_t>(*static_cast<const E*>(f)); },
          [](void* f, std::size_t i) { *static_cast<E*>(f) = static_cast<E>(i); }, &choice_names<E>()};
}

template <class E>
ChoiceRef choice_ref(std::optional<E>* field) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all{""};
    for (const std::string& name : choice_names<E>()) all.push_back(name);
    return all;
  }();
  return {field,
          [](const void* f) {
            const auto& value = *static_cast<const std::optional<E>*>(f);
            return value ? static_cast<std::size_t>(*value) + 1 : std::size_t{0};
          },
          [](void* f, std::size_t i) {
            auto& value = *static_cast<std::optional<E>*>(f);
            value = i == 0 ? std::nullopt : std::optional<E>(static_cast<E>(i - 1));
          },
          &names};
}

}  // namespace troupe
