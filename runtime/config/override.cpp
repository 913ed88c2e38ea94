#include "runtime/config/override.hpp"

#include <utility>

#include "runtime/config/convert.hpp"
#include "runtime/config/schema.hpp"

namespace troupe {
namespace {

struct Override {
  std::string label;  // "--set batch.micro_batch_size=4", for messages
  std::string section;
  std::string key;
  std::string value_text;
};

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return std::string(text.substr(first, last - first + 1));
}

Result<Override> split_override(const std::string& text) {
  Override out;
  out.label = "--set " + text;
  const Error malformed =
      make_error(fmt::format("{}: an override must have the form section.key=value, e.g. --set "
                             "batch.micro_batch_size=4",
                             out.label));
  const auto equals = text.find('=');
  if (equals == std::string::npos) return malformed;
  const std::string name = trim(std::string_view(text).substr(0, equals));
  const auto dot = name.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size() ||
      name.find('.', dot + 1) != std::string::npos) {
    return malformed;
  }
  out.section = name.substr(0, dot);
  out.key = name.substr(dot + 1);
  out.value_text = trim(std::string_view(text).substr(equals + 1));
  if (const KeySpec* spec = find_key(out.section, out.key); spec && spec->secret)
    out.label = fmt::format("--set {}.{}=(not shown)", out.section, out.key);
  return out;
}

// A one-key document {v = value}; bare text when the value is not a single TOML value.
toml::table parse_value(const std::string& text) {
  Result<toml::table> parsed = parse_toml("v = " + text, "--set");
  if (parsed.ok() && parsed->size() == 1 && parsed->contains("v")) {
    return std::move(parsed).value();
  }
  toml::table bare;
  bare.insert("v", text);
  return bare;
}

Status apply_override(toml::table& root, const Override& override, ConfigOrigins& origins) {
  if (key_names(override.section).empty()) {
    return make_error(fmt::format("{}: {}", override.label, unknown_section_message(override.section)));
  }
  if (find_key(override.section, override.key) == nullptr) {
    return make_error(
        fmt::format("{}: {}", override.label, unknown_key_message(override.section, override.key)));
  }
  if (!root.contains(override.section)) root.insert(override.section, toml::table{});
  toml::table* section = root.get_as<toml::table>(override.section);
  // A section that is not a table is the file's error; conversion reports it.
  if (section == nullptr) return {};
  toml::table value = parse_value(override.value_text);
  value.get("v")->visit([&](auto& node) { section->insert_or_assign(override.key, std::move(node)); });
  origins.by_key[fmt::format("{}.{}", override.section, override.key)] = override.label;
  return {};
}

}  // namespace

Status apply_overrides(toml::table& root, const std::vector<std::string>& overrides, ConfigOrigins& origins) {
  for (const std::string& text : overrides) {
    Result<Override> override = split_override(text);
    if (!override.ok()) return override.error();
    TROUPE_TRY(apply_override(root, *override, origins));
  }
  return {};
}

}  // namespace troupe
