#include "runtime/config/render.hpp"

#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/config/schema.hpp"
#include "runtime/config/toml_text.hpp"

namespace troupe {
namespace {

struct ValueText {
  std::string operator()(const int64_t* value) const { return fmt::format("{}", *value); }
  std::string operator()(const double* value) const { return toml_float(*value); }
  std::string operator()(const bool* value) const { return *value ? "true" : "false"; }
  std::string operator()(const std::string* value) const { return toml_string(*value); }
  std::string operator()(ChoiceRef choice) const {
    return toml_string((*choice.names)[choice.get(choice.field)]);
  }
  std::string operator()(const PipelinePartition* partition) const {
    if (partition->counts.empty()) return toml_string(name_of(partition->method));
    return fmt::format("[{}]", fmt::join(partition->counts, ", "));
  }
  // "auto" has been replaced by the size it chose when the job was loaded.
  std::string operator()(MicroBatchRef micro) const { return fmt::format("{}", *micro.size); }
  std::string operator()(const std::vector<std::string>* values) const {
    std::vector<std::string> quoted;
    for (const std::string& v : *values) quoted.push_back(toml_string(v));
    return fmt::format("[{}]", fmt::join(quoted, ", "));
  }
  std::string operator()(const std::vector<double>* values) const {
    std::vector<std::string> shown;
    for (double v : *values) shown.push_back(toml_float(v));
    return fmt::format("[{}]", fmt::join(shown, ", "));
  }
  std::string operator()(BetasRef betas) const {
    return fmt::format("[{}, {}]", toml_float(*betas.beta1), toml_float(*betas.beta2));
  }
};

// The relation that produced a derived key, shown above it.
std::optional<std::string> derived_note(const JobConfig& config, const KeySpec& spec) {
  const std::string name = fmt::format("{}.{}", spec.section, spec.key);
  if (name == "cluster.world_size") {
    return fmt::format("world_size = dp {} × pp {} × tp {}", config.parallel.dp, config.parallel.pp,
                       config.parallel.tp);
  }
  if (name == "batch.micro_batch_size" && config.batch.micro_batch_auto)
    return "chosen by micro_batch_size = \"auto\": the largest that fits memory_budget_bytes";
  if (name == "batch.global_batch_size") {
    return fmt::format("global = micro {} × accumulation {} × dp {}", config.batch.micro_batch_size,
                       config.batch.gradient_accumulation_steps, config.parallel.dp);
  }
  int64_t eight_d_model = 0;
  if (name == "model.d_ff" && !__builtin_mul_overflow(config.model.d_model, 8, &eight_d_model)) {
    const int64_t d = config.model.d_model, ff = config.model.d_ff;
    if (config.model.type == "gpt" && ff == eight_d_model / 2) return fmt::format("d_ff = 4 × d_model {}", d);
    if (config.model.type == "llama" && ff == (eight_d_model / 3 + 255) / 256 * 256)
      return fmt::format("d_ff = 8/3 × d_model {}, rounded up to a multiple of 256", d);
  }
  return std::nullopt;
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

std::string render_config(const JobConfig& config) {
  JobConfig copy = config;  // the schema hands out mutable field pointers
  std::string out =
      fmt::format("# troupe job configuration resolved from {}; every key is listed (docs/CONFIG.md).\n",
                  one_line(config.source));
  std::string_view section;
  for (const KeySpec& spec : key_specs()) {
    if (spec.section != section) {
      section = spec.section;
      out += fmt::format("\n[{}]\n", section);
    }
    if (auto note = derived_note(copy, spec)) out += fmt::format("# derived: {}\n", *note);
    if (spec.secret) {  // a secret is a string: its length only, and the text loads without it
      const std::string& value = *std::get<std::string*>(spec.field(copy));
      if (!value.empty()) {
        out += fmt::format("# {} = (set, {} bytes; a secret, not shown)\n", spec.key, value.size());
        continue;
      }
    }
    out += fmt::format("{} = {}\n", spec.key, std::visit(ValueText{}, spec.field(copy)));
  }
  return out;
}

}  // namespace troupe
