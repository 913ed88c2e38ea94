#include "runtime/config/convert.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

#include "runtime/config/schema.hpp"
#include "runtime/config/suggest.hpp"
#include "runtime/config/toml_text.hpp"

namespace troupe {
namespace {

constexpr std::size_t kValueTextMax = 60;  // longer values are cut in messages

using Entry = std::pair<const toml::key*, const toml::node*>;

Error syntax_error(const toml::parse_error& error, const std::string& source_name) {
  std::string description(error.description());
  if (!description.empty()) {
    description[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(description[0])));
  }
  return make_error(fmt::format("{}:{}:{}: invalid TOML: {}", source_name, error.source().begin.line,
                                error.source().begin.column, description));
}

// "job.toml:3:14", or just the source when the region is unknown (an inserted override).
std::string position(const toml::source_region& region, const std::string& source) {
  if (region.begin.line == 0) return source;
  return fmt::format("{}:{}:{}", source, region.begin.line, region.begin.column);
}

// toml++ keeps tables sorted by name; errors should come in the order the user wrote.
std::vector<Entry> in_file_order(const toml::table& table) {
  std::vector<Entry> entries;
  for (auto&& [key, node] : table) entries.emplace_back(&key, &node);
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return std::make_pair(pa.line, pa.column) < std::make_pair(pb.line, pb.column);
  });
  return entries;
}

const char* kind_of(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

// The value as TOML text: "four", 4.0, [0.9, 0.95].
std::string value_text(const toml::node& node) {
  if (const auto* text = node.as_string()) return toml_string(text->get());
  if (const auto* real = node.as_floating_point()) return toml_float(real->get());
  if (const auto* array = node.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < array->size(); ++i) {
      out += (i == 0 ? "" : ", ") + value_text(*array->get(i));
    }
    return out + "]";
  }
  if (node.is_table()) return "{...}";
  std::ostringstream out;  // integers, booleans, dates and times
  node.visit([&](const auto& value) { out << value; });
  return out.str();
}

// Reads one value into its field; the overload is chosen by the field's type.
class ValueReader {
 public:
  ValueReader(const toml::node& node, const KeySpec& spec, std::string where)
      : node_(node), spec_(spec), where_(std::move(where)) {}

  Status operator()(int64_t* out) const {
    const auto* value = node_.as_integer();
    if (value == nullptr) return type_error();
    *out = value->get();
    return {};
  }
  Status operator()(double* out) const {
    if (const auto* value = node_.as_integer()) {
      *out = static_cast<double>(value->get());  // integers are promoted where floats go
      return {};
    }
    const auto* value = node_.as_floating_point();
    if (value == nullptr) return type_error();
    *out = value->get();
    return {};
  }
  Status operator()(bool* out) const {
    const auto* value = node_.as_boolean();
    if (value == nullptr) return type_error();
    *out = value->get();
    return {};
  }
  Status operator()(std::string* out) const {
    const auto* value = node_.as_string();
    if (value == nullptr) return type_error();
    *out = value->get();
    return {};
  }
  Status operator()(ChoiceRef out) const;
  Status operator()(BetasRef out) const;
  Status operator()(std::vector<std::string>* out) const;
  Status operator()(std::vector<double>* out) const;
  Status operator()(PipelinePartition* out) const;
  Status operator()(MicroBatchRef out) const {
    if (const auto* text = node_.as_string()) {
      if (text->get() != "auto") return type_error();
      *out.automatic = true;
      *out.size = 0;
      return {};
    }
    *out.automatic = false;
    return (*this)(out.size);
  }

 private:
  Error choice_error(const std::string& got, const std::vector<std::string>& names) const;
  Error type_error() const {
    // A secret is one even when it has the wrong type: only its kind is shown.
    return make_error(fmt::format(
        "{}: [{}] {} must be {}, got {}", where_, spec_.section, spec_.key, spec_.expect,
        spec_.secret ? fmt::format("a value not shown ({})", kind_of(node_)) : describe_value(node_)));
  }

  const toml::node& node_;
  const KeySpec& spec_;
  std::string where_;
};

Status ValueReader::operator()(ChoiceRef out) const {
  const auto* value = node_.as_string();
  if (value == nullptr) return type_error();
  const std::vector<std::string>& names = *out.names;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == value->get()) {
      out.set(out.field, i);
      return {};
    }
  }
  return choice_error(value->get(), names);
}

Error ValueReader::choice_error(const std::string& got, const std::vector<std::string>& names) const {
  // The names are listed anyway; a guess only for longer words, where it is a typo's (for
  // device = "gpu", "cpu" would be a wrong guess).
  std::string hint;
  if (auto close = got.size() >= 4 ? suggest(got, names) : std::nullopt; close && !close->empty()) {
    hint = fmt::format("; did you mean {}?", toml_string(*close));
  }
  return make_error(fmt::format("{}: [{}] {} must be {}, got {}{}", where_, spec_.section, spec_.key,
                                spec_.expect, toml_string(got), hint));
}

Status ValueReader::operator()(BetasRef out) const {
  const auto* array = node_.as_array();
  if (array == nullptr || array->size() != 2) return type_error();
  double betas[2] = {0, 0};
  for (std::size_t i = 0; i < 2; ++i) {
    const toml::node& element = *array->get(i);
    if (const auto* integer = element.as_integer()) {
      betas[i] = static_cast<double>(integer->get());
    } else if (const auto* real = element.as_floating_point()) {
      betas[i] = real->get();
    } else {
      return type_error();
    }
  }
  *out.beta1 = betas[0];
  *out.beta2 = betas[1];
  return {};
}

Status ValueReader::operator()(std::vector<std::string>* out) const {
  const auto* array = node_.as_array();
  if (array == nullptr) return type_error();
  std::vector<std::string> values;
  for (const toml::node& element : *array) {
    const auto* text = element.as_string();
    if (text == nullptr) return type_error();
    values.push_back(text->get());
  }
  *out = std::move(values);
  return {};
}

// An array of numbers, or the same as a string of numbers between commas ("969,30,1", as
// Megatron's --split is written).
Status ValueReader::operator()(std::vector<double>* out) const {
  std::vector<double> values;
  if (const auto* text = node_.as_string()) {
    std::string item;
    std::istringstream in(text->get());
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      values.push_back(std::strtod(item.c_str(), &end));
      if (item.empty() || end == item.c_str() || *end != '\0') return type_error();
    }
    if (values.empty()) return type_error();
    *out = std::move(values);
    return {};
  }
  const auto* array = node_.as_array();
  if (array == nullptr) return type_error();
  for (const toml::node& element : *array) {
    if (const auto* integer = element.as_integer())
      values.push_back(static_cast<double>(integer->get()));
    else if (const auto* real = element.as_floating_point())
      values.push_back(real->get());
    else
      return type_error();
  }
  *out = std::move(values);
  return {};
}

Status ValueReader::operator()(PipelinePartition* out) const {
  if (const auto* method = node_.as_string()) {
    auto chosen = parse_choice<PartitionMethod>(method->get());
    if (!chosen) return choice_error(method->get(), choice_names<PartitionMethod>());
    *out = PipelinePartition{*chosen, {}};
    return {};
  }
  const auto* array = node_.as_array();
  if (array == nullptr || array->empty()) return type_error();
  PipelinePartition counts{PartitionMethod::flops, {}};
  for (const toml::node& element : *array) {
    const auto* count = element.as_integer();
    if (count == nullptr) return type_error();
    counts.counts.push_back(count->get());
  }
  *out = std::move(counts);
  return {};
}

Status read_section(const toml::table& table, std::string_view section, JobConfig& config,
                    ConfigOrigins& origins) {
  for (const auto& [key, node] : in_file_order(table)) {
    const KeySpec* spec = find_key(section, key->str());
    if (spec == nullptr) {
      return make_error(fmt::format("{}: {}", position(key->source(), origins.source),
                                    unknown_key_message(section, key->str())));
    }
    // An override keeps its "--set ..." origin; a file value gets its position.
    const std::string& where =
        origins.by_key
            .try_emplace(fmt::format("{}.{}", section, key->str()), position(node->source(), origins.source))
            .first->second;
    TROUPE_TRY(std::visit(ValueReader(*node, *spec, where), spec->field(config)));
  }
  return {};
}

// A key at the top level of the document, outside any [section].
Error stray_key_error(const toml::key& key, const ConfigOrigins& origins) {
  const std::string where = position(key.source(), origins.source);
  for (const KeySpec& spec : key_specs()) {
    if (spec.key == key.str()) {
      return make_error(fmt::format("{}: key {} is outside any section; did you mean [{}] {}?", where,
                                    key.str(), spec.section, spec.key));
    }
  }
  std::string sections;
  for (const std::string& name : section_names()) {
    sections += fmt::format("{}[{}]", sections.empty() ? "" : ", ", name);
  }
  return make_error(
      fmt::format("{}: key {} is outside any section; keys belong in {}", where, key.str(), sections));
}

}  // namespace

Result<toml::table> parse_toml(std::string_view text, const std::string& source_name) {
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text, std::string_view(source_name));
  } catch (const toml::parse_error& error) {
    return syntax_error(error, source_name);
  }
#else
  toml::parse_result result = toml::parse(text, std::string_view(source_name));
  if (!result) return syntax_error(result.error(), source_name);
  return std::move(result).table();
#endif
}

std::string describe_value(const toml::node& node) {
  if (node.is_table()) return "a table";
  std::string shown = value_text(node);
  if (shown.size() > kValueTextMax) shown = shown.substr(0, kValueTextMax) + "...";
  return fmt::format("{} ({})", shown, kind_of(node));
}

Result<JobConfig> table_to_config(const toml::table& root, ConfigOrigins& origins) {
  JobConfig config;
  config.source = origins.source;
  for (const auto& [key, node] : in_file_order(root)) {
    const auto& names = section_names();
    const bool known = std::find(names.begin(), names.end(), key->str()) != names.end();
    if (!node->is_table()) {
      if (!known) return stray_key_error(*key, origins);
      return make_error(fmt::format("{}: [{}] must be a section (a table), got {}",
                                    position(node->source(), origins.source), key->str(),
                                    describe_value(*node)));
    }
    if (!known) {
      return make_error(fmt::format("{}: {}", position(key->source(), origins.source),
                                    unknown_section_message(key->str())));
    }
    TROUPE_TRY(read_section(*node->as_table(), key->str(), config, origins));
  }
  return config;
}

}  // namespace troupe
