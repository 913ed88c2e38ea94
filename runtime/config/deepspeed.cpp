#include "runtime/config/deepspeed.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>
#include <nlohmann/json.hpp>

#include "runtime/config/convert.hpp"
#include "runtime/config/deepspeed_schema.hpp"
#include "runtime/config/origins.hpp"
#include "runtime/config/override.hpp"
#include "runtime/config/resolve.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/config/suggest.hpp"

namespace troupe {
namespace {

using Json = nlohmann::json;

struct Target {
  const char* section;
  const char* key;
};

// DeepSpeed keys that are troupe keys under another name (scheduler.params.* are
// [scheduler]'s keys by the same names; optimizer.type is read on its own).
const std::map<std::string, Target, std::less<>>& supported_keys() {
  static const std::map<std::string, Target, std::less<>> keys = {
      {"train_batch_size", {"batch", "global_batch_size"}},
      {"train_micro_batch_size_per_gpu", {"batch", "micro_batch_size"}},
      {"gradient_accumulation_steps", {"batch", "gradient_accumulation_steps"}},
      {"gradient_clipping", {"optimizer", "gradient_clipping"}},
      {"steps_per_print", {"train", "log_interval"}},
      {"optimizer.params.lr", {"optimizer", "lr"}},
      {"optimizer.params.betas", {"optimizer", "betas"}},
      {"optimizer.params.eps", {"optimizer", "eps"}},
      {"optimizer.params.weight_decay", {"optimizer", "weight_decay"}},
      {"optimizer.params.momentum", {"optimizer", "momentum"}},
      {"optimizer.params.nesterov", {"optimizer", "nesterov"}},
      {"scheduler.type", {"scheduler", "type"}},
      {"zero_optimization.stage", {"zero", "stage"}},
      {"zero_optimization.reduce_bucket_size", {"zero", "reduce_bucket_size"}},
      {"zero_optimization.overlap_comm", {"zero", "overlap_comm"}},
      {"zero_optimization.stage3_prefetch_bucket_size", {"zero", "prefetch_bucket_size"}},
      {"zero_optimization.stage3_max_live_parameters", {"zero", "max_live_parameters"}},
      {"zero_optimization.stage3_max_reuse_distance", {"zero", "max_reuse_distance"}},
      {"zero_optimization.stage3_param_persistence_threshold", {"zero", "param_persistence_threshold"}},
      // DeepSpeed's current names for the four above (the stage3_ ones are aliases now).
      {"zero_optimization.prefetch_bucket_size", {"zero", "prefetch_bucket_size"}},
      {"zero_optimization.max_live_parameters", {"zero", "max_live_parameters"}},
      {"zero_optimization.max_reuse_distance", {"zero", "max_reuse_distance"}},
      {"zero_optimization.param_persistence_threshold", {"zero", "param_persistence_threshold"}},
      {"tensor_parallel.autotp_size", {"parallel", "tp"}},
      {"zero_optimization.sub_group_size", {"offload", "sub_group_size"}},
      {"zero_optimization.offload_optimizer.device", {"offload", "optimizer"}},
      {"zero_optimization.offload_optimizer.nvme_path", {"offload", "nvme_path"}},
      {"zero_optimization.offload_optimizer.buffer_count", {"offload", "buffer_count"}},
      {"zero_optimization.offload_param.device", {"offload", "param"}},
      {"zero_optimization.offload_param.nvme_path", {"offload", "nvme_path"}},
      {"zero_optimization.offload_param.buffer_count", {"offload", "buffer_count"}},
      {"aio.block_size", {"offload", "block_size"}},
      {"aio.queue_depth", {"offload", "queue_depth"}},
  };
  return keys;
}

// DeepSpeed keys that tune its own implementation, logging or integrations: troupe does
// the same work its own way (or has no such integration), so they are ignored with a
// warning. A key ending in '.' stands for everything under it.
const std::set<std::string, std::less<>>& ignored_keys() {
  static const std::set<std::string, std::less<>> keys = {
      "wall_clock_breakdown",
      "memory_breakdown",
      "dump_state",
      "comet.",
      "flops_profiler.",
      "comms_logger.",
      "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer",
      "activation_checkpointing.",
      "optimizer.params.torch_adam",
      "zero_optimization.contiguous_gradients",
      "zero_optimization.reduce_scatter",
      "zero_optimization.allgather_partitions",
      "zero_optimization.allgather_bucket_size",
      "zero_optimization.round_robin_gradients",
      "zero_optimization.load_from_fp32_weights",
      "zero_optimization.ignore_unused_parameters",
      "zero_optimization.elastic_checkpoint",
      "zero_optimization.use_multi_rank_bucket_allreduce",
      "zero_optimization.gather_16bit_weights_on_model_save",
      "zero_optimization.cpu_offload_use_pin_memory",
      "zero_optimization.stage3_gather_16bit_weights_on_model_save",
      "zero_optimization.stage3_gather_fp16_weights_on_model_save",
      "zero_optimization.offload_optimizer.pin_memory",
      "zero_optimization.offload_optimizer.fast_init",
      "zero_optimization.offload_param.pin_memory",
      "zero_optimization.offload_param.buffer_size",
      "zero_optimization.offload_param.max_in_cpu",
      "aio.thread_count",
      "aio.single_submit",
      "aio.overlap_events",
      "aio.intra_op_parallelism",
      "aio.use_gds"};
  return keys;
}

bool ignored(std::string_view path) {
  for (const std::string& key : ignored_keys()) {
    if (key.back() == '.' ? path.substr(0, key.size()) == key || path == key.substr(0, key.size() - 1)
                          : path == key)
      return true;
  }
  return false;
}

std::string shown(const Json& value) {
  return value.dump();
}

// What a JSON value is, for messages: "a string", "a number", ...
std::string kind_of(const Json& value) {
  switch (value.type()) {
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "true or false";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "null";
  }
}

class Converter {
 public:
  Converter(const std::string& source, ConfigOrigins& origins) : source_(source), origins_(origins) {}

  Status run(const Json& root) {
    if (!root.is_object())
      return make_error(
          fmt::format("{}: a DeepSpeed config is a JSON object, not {}", source_, kind_of(root)));
    optimizer_type(root);
    precision(root, "fp16");
    precision(root, "bf16");
    precision(root, "bfloat16");  // DeepSpeed's older name of bf16, still read
    monitor(root, "tensorboard", "tensorboard");
    monitor(root, "csv_monitor", "csv");
    wandb(root);
    walk(root, "");
    if (!refused_.empty())
      return make_error(
          fmt::format("{}: troupe does not run {} of this DeepSpeed config: {}", source_,
                      refused_.size() == 1 ? "one key" : fmt::format("{} keys", refused_.size()),
                      fmt::join(refused_, "; ")));
    if (!type_errors_.empty()) return make_error(type_errors_.front());
    return {};
  }

  toml::table& table() { return table_; }
  std::vector<std::string>& warnings() { return warnings_; }

 private:
  void refuse(const std::string& path, const std::string& why) {
    refused_.push_back(fmt::format("{} ({})", path, why));
  }

  // optimizer.type: DeepSpeed's "Adam" is AdamW unless params.adam_w_mode is false.
  void optimizer_type(const Json& root) {
    done_.insert("optimizer.type");
    if (!root.contains("optimizer") || !root["optimizer"].is_object() || !root["optimizer"].contains("type"))
      return;
    const Json& type = root["optimizer"]["type"];
    const Json params = root["optimizer"].value("params", Json::object());
    if (!type.is_string()) return refuse("optimizer.type", "a string naming the optimizer");
    const std::string name = type.get<std::string>();
    std::string lowered;
    for (char c : name) lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string mine;
    if (lowered == "adamw") mine = "adamw";
    if (lowered == "adam") mine = params.value("adam_w_mode", true) ? "adamw" : "adam";
    if (lowered == "sgd") mine = "sgd";
    if (mine.empty())
      return refuse("optimizer.type", fmt::format("\"{}\": troupe has Adam, AdamW and SGD", name));
    if (params.contains("bias_correction") && params["bias_correction"] == false)
      refuse("optimizer.params.bias_correction", "false: troupe's Adam always corrects its bias");
    if (params.contains("amsgrad") && params["amsgrad"] == true)
      refuse("optimizer.params.amsgrad", "true: troupe's Adam has no AMSGrad");
    for (const char* read :
         {"optimizer.params.bias_correction", "optimizer.params.amsgrad", "optimizer.params.adam_w_mode"})
      done_.insert(read);
    put("optimizer.type", "optimizer", "type", Json(mine));
  }

  // fp16 / bf16: enabled is [precision] dtype (troupe decides there what it can run);
  // a disabled section has nothing that applies.
  void precision(const Json& root, const char* name) {
    if (!root.contains(name)) return;
    const Json& section = root[name];
    const std::string prefix = std::string(name) + ".";
    done_.insert(name);
    if (!section.is_object()) return refuse(name, "an object with \"enabled\"");
    if (!section.contains("enabled")) return;
    const Json& enabled = section["enabled"];
    if (enabled == "auto") return from_job(prefix + "enabled");
    if (!enabled.is_boolean()) return refuse(prefix + "enabled", "true or false");
    if (enabled != true) return;
    const std::string dtype = std::string_view(name) == "fp16" ? "fp16" : "bf16";
    put(prefix + "enabled", "precision", "dtype", Json(dtype));
    static const std::set<std::string, std::less<>> scaler_keys = {
        "loss_scale", "initial_scale_power",    "loss_scale_window",
        "hysteresis", "consecutive_hysteresis", "min_loss_scale"};
    for (const auto& [key, value] : section.items()) {
      if (key == "enabled") continue;
      if (std::string_view(name) == "fp16" && scaler_keys.count(key)) {
        put(prefix + key, "precision", key, value);
        continue;
      }
      if (const DeepSpeedRule* rule =
              deepspeed_rule(std::string_view(name) == "fp16" ? prefix + key : "bf16." + key)) {
        apply(*rule, prefix + key, value);
        continue;
      }
      warnings_.push_back(
          fmt::format("{}: {}{} is ignored: troupe's {} needs no such setting", source_, prefix, key, name));
    }
  }

  // tensorboard / csv_monitor: enabled, they write where DeepSpeed's would,
  // output_path/job_name (DeepSpeed's defaults "" and "DeepSpeedJobName"), as [monitor]'s
  // `key`; a disabled section has nothing that applies.
  void monitor(const Json& root, const char* name, const char* key) {
    if (!root.contains(name)) return;
    const Json& section = root[name];
    const std::string prefix = std::string(name) + ".";
    done_.insert(name);
    if (!section.is_object()) return refuse(name, "an object with \"enabled\"");
    const Json enabled = section.value("enabled", Json(false));
    if (!enabled.is_boolean()) return refuse(prefix + "enabled", "true or false");
    if (enabled != true) return;
    std::string folder[2] = {"", "DeepSpeedJobName"};
    const char* parts[2] = {"output_path", "job_name"};
    for (int i = 0; i < 2; ++i) {
      if (!section.contains(parts[i])) continue;
      if (!section[parts[i]].is_string()) return refuse(prefix + parts[i], "a string");
      folder[i] = section[parts[i]].get<std::string>();
    }
    for (const auto& [k, value] : section.items())
      if (k != "enabled" && k != parts[0] && k != parts[1])
        warnings_.push_back(
            fmt::format("{}: {}{} is ignored: troupe's {} needs no such setting", source_, prefix, k, name));
    const std::string path = (std::filesystem::path(folder[0]) / folder[1]).string();
    put(prefix + "enabled", "monitor", key, Json(path));
  }

  // wandb: W&B's client sends to its servers; troupe's ranks have no network at run time.
  void wandb(const Json& root) {
    if (!root.contains("wandb")) return;
    done_.insert("wandb");
    const Json& section = root["wandb"];
    if (!section.is_object()) return refuse("wandb", "an object with \"enabled\"");
    const Json enabled = section.value("enabled", Json(false));
    if (!enabled.is_boolean()) return refuse("wandb.enabled", "true or false");
    if (enabled == false) return;
    refuse("wandb.enabled",
           "W&B's client sends the metrics to its servers, and troupe's ranks reach no network while "
           "they train: set tensorboard.enabled (or [monitor] tensorboard) and upload the folder with "
           "`wandb sync` afterwards");
  }

  void walk(const Json& node, const std::string& path) {
    if (done_.count(path)) return;
    // A top-level key that starts with "_" is a comment (JSON has none; DeepSpeed reads only
    // the keys it knows): "_comment": "what this job is for".
    if (!path.empty() && path[0] == '_' && path.find('.') == std::string::npos) return;
    if (!path.empty() && ignored(path)) {
      warnings_.push_back(
          fmt::format("{}: {} is ignored: it tunes DeepSpeed's own implementation or logging, "
                      "which troupe does its own way",
                      source_, path));
      return;
    }
    if (!path.empty() && !supported_keys().count(path)) {
      // The rest of DeepSpeed's schema: a section's rule covers its whole subtree at once,
      // but a quiet one (a feature's settings) lets its children's own rules speak.
      if (const DeepSpeedRule* rule = deepspeed_rule(path);
          rule && (rule->path == path || rule->kind != DeepSpeedRule::Kind::quiet || !node.is_object()))
        return apply(*rule, path, node);
    }
    if (node.is_object() && !supported_keys().count(path)) {
      for (const auto& [key, child] : node.items()) walk(child, path.empty() ? key : path + "." + key);
      return;
    }
    leaf(node, path);
  }

  // A key of DeepSpeed's schema troupe does not convert: said, accepted or refused, with why.
  void apply(const DeepSpeedRule& rule, const std::string& path, const Json& value) {
    using Kind = DeepSpeedRule::Kind;
    if (rule.kind == Kind::quiet) return;
    if (rule.kind == Kind::ignore) {
      warnings_.push_back(fmt::format("{}: {} is ignored: {}", source_, path, rule.why));
      return;
    }
    if (rule.kind == Kind::refuse_unless && value == Json::parse(rule.fine)) return;
    refuse(path,
           rule.kind == Kind::refuse ? std::string(rule.why) : fmt::format("{}: {}", shown(value), rule.why));
  }

  // "auto", as Hugging Face's integration writes it: the job's value (its TOML, --set or
  // troupe's default), said once.
  void from_job(const std::string& path) {
    const std::string_view key = *auto_from_job(path);
    const std::size_t dot = key.find('.');
    warnings_.push_back(fmt::format("{}: {} is \"auto\": it takes the job's [{}] {}", source_, path,
                                    key.substr(0, dot), key.substr(dot + 1)));
  }

  // DeepSpeed's deprecated spellings it still maps: cpu_offload and cpu_offload_param.
  bool legacy(const Json& value, const std::string& path) {
    const bool optimizer = path == "zero_optimization.cpu_offload";
    if (!optimizer && path != "zero_optimization.cpu_offload_param") return false;
    if (!value.is_boolean()) {
      refuse(path, "true or false");
      return true;
    }
    if (value == true) put(path, "offload", optimizer ? "optimizer" : "param", Json("cpu"));
    return true;
  }

  void leaf(const Json& value, const std::string& path) {
    if (value == "auto" && auto_from_job(path)) return from_job(path);
    if (legacy(value, path)) return;
    if (path.rfind("scheduler.params.", 0) == 0) {
      const std::string key = path.substr(std::string("scheduler.params.").size());
      if (!find_key("scheduler", key)) return refuse(path, "not a parameter of DeepSpeed's four schedules");
      return put(path, "scheduler", key, value);
    }
    if (path == "communication_data_type") return put(path, "precision", "communication_data_type", value);
    if (path == "zero_optimization.offload_optimizer.ratio") {
      if (!value.is_number() || value.get<double>() != 1.0)
        refuse(path, "a partial optimizer offload: troupe offloads all of the optimizer state or none");
      return;
    }
    auto found = supported_keys().find(path);
    if (found == supported_keys().end()) return refuse(path, unknown(path));
    put(path, found->second.section, found->second.key, value);
  }

  // section.key = value, checked against the key's type in the schema; its origin is the
  // DeepSpeed key path.
  void put(const std::string& path, const std::string& section, const std::string& key, const Json& value) {
    const KeySpec* spec = find_key(section, key);
    if (!spec) return refuse(path, "not a key troupe knows");
    if (value.is_string() && value.get<std::string>() == "auto")
      return refuse(path,
                    "\"auto\" is filled in by Hugging Face's integration, not by DeepSpeed: give the value, "
                    "or set it with --set " +
                        section + "." + key);
    JobConfig probe;
    const FieldRef field = spec->field(probe);
    auto wrong = [&](const char* expected) {
      type_errors_.push_back(fmt::format("{}: {} must be {}, got {} ({}), for [{}] {}", source_, path,
                                         expected, shown(value), kind_of(value), section, key));
    };
    toml::table& into = *table_.emplace(section, toml::table{}).first->second.as_table();
    if (std::holds_alternative<int64_t*>(field) || std::holds_alternative<MicroBatchRef>(field)) {
      // 5e8 is how DeepSpeed configs write bucket sizes: a whole number is an integer.
      if (!value.is_number() || std::floor(value.get<double>()) != value.get<double>())
        return wrong("an integer");
      into.insert_or_assign(
          key, value.is_number_float() ? static_cast<int64_t>(value.get<double>()) : value.get<int64_t>());
    } else if (std::holds_alternative<double*>(field)) {
      if (!value.is_number()) return wrong("a number");
      into.insert_or_assign(key, value.get<double>());
    } else if (std::holds_alternative<bool*>(field)) {
      if (!value.is_boolean()) return wrong("true or false");
      into.insert_or_assign(key, value.get<bool>());
    } else if (std::holds_alternative<BetasRef>(field)) {
      if (!value.is_array() || value.size() != 2 || !value[0].is_number() || !value[1].is_number())
        return wrong("an array of two numbers");
      into.insert_or_assign(key, toml::array{value[0].get<double>(), value[1].get<double>()});
    } else {
      if (!value.is_string()) return wrong("a string");
      into.insert_or_assign(key, value.get<std::string>());
    }
    origins_.by_key[section + "." + key] = fmt::format("{}: {}", source_, path);
  }

  // A key in no list: DeepSpeed would not know it either.
  static std::string unknown(const std::string& path) {
    auto close = suggest(path, deepspeed_schema_paths());
    return close ? fmt::format("not a DeepSpeed key; did you mean {}?", *close)
                 : "not a DeepSpeed key, nor one troupe knows";
  }

  std::string source_;
  ConfigOrigins& origins_;
  toml::table table_;
  std::set<std::string> done_;  // handled before the walk
  std::vector<std::string> refused_, type_errors_, warnings_;
};

// "line L, column C" of byte `offset` in `text` (nlohmann counts bytes from 1).
std::string position_of(std::string_view text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("{}:{}", line, column);
}

}  // namespace

bool is_deepspeed_config(std::string_view path) {
  return path.size() >= 5 && path.substr(path.size() - 5) == ".json";
}

Result<toml::table> deepspeed_table(std::string_view json_text, const std::string& source_name,
                                    ConfigOrigins& origins, std::vector<std::string>& warnings) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    // nlohmann's text repeats the position after its own prefix: keep what follows.
    std::string what = e.what();
    const std::size_t column = what.find("column ");
    const std::size_t detail = column == std::string::npos ? std::string::npos : what.find(": ", column);
    return make_error(fmt::format("{}:{}: not valid JSON: {}", source_name, position_of(json_text, e.byte),
                                  detail == std::string::npos ? what : what.substr(detail + 2)));
  }
  Converter converter(source_name, origins);
  TROUPE_TRY(converter.run(root));
  for (std::string& w : converter.warnings()) warnings.push_back(std::move(w));
  return std::move(converter.table());
}

Result<JobConfig> load_deepspeed_string(std::string_view json_text, const std::string& source_name,
                                        const std::vector<std::string>& overrides) {
  ConfigOrigins origins;
  origins.source = source_name;
  std::vector<std::string> warnings;
  auto table = deepspeed_table(json_text, source_name, origins, warnings);
  if (!table) return table.error();
  TROUPE_TRY(apply_overrides(*table, overrides, origins));
  Result<JobConfig> raw = table_to_config(*table, origins);
  if (!raw.ok()) return raw.error();
  auto resolved = resolve_config(std::move(raw).value(), origins);
  if (!resolved) return resolved.error();
  resolved->warnings = std::move(warnings);
  return resolved;
}

Status merge_deepspeed_config(toml::table& root, const std::string& toml_source, ConfigOrigins& origins,
                              std::vector<std::string>& warnings) {
  toml::node* pointer = root.get("deepspeed_config");
  if (!pointer) return {};
  const auto& at = pointer->source().begin;
  const std::string where = fmt::format("{}:{}:{}", toml_source, at.line, at.column);
  if (!pointer->is_string())
    return make_error(fmt::format("{}: deepspeed_config must be a path to a DeepSpeed JSON config", where));
  std::filesystem::path path = pointer->as_string()->get();
  if (path.is_relative()) path = std::filesystem::path(toml_source).parent_path() / path;
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return make_error(
        fmt::format("{}: deepspeed_config: cannot read {}: {}", where, path.string(), std::strerror(errno)));
  std::ostringstream text;
  text << file.rdbuf();
  ConfigOrigins from_json;
  from_json.source = path.string();
  auto table = deepspeed_table(text.str(), path.string(), from_json, warnings);
  if (!table) return table.error();
  for (auto& [section, keys] : *table) {
    toml::table* mine = root.get_as<toml::table>(section.str());
    if (!mine) mine = root.insert_or_assign(section.str(), toml::table{}).first->second.as_table();
    for (auto& [key, value] : *keys.as_table()) {
      const std::string name = fmt::format("{}.{}", section.str(), key.str());
      if (const toml::node* both = mine->get(key.str()))
        return make_error(
            fmt::format("{}:{}:{}: [{}] {} is set here and by deepspeed_config ({}); set it in one "
                        "place",
                        toml_source, both->source().begin.line, both->source().begin.column, section.str(),
                        key.str(), from_json.where(section.str(), key.str())));
      mine->insert_or_assign(key.str(), value);
      origins.by_key[name] = from_json.where(section.str(), key.str());
    }
  }
  root.erase("deepspeed_config");
  return {};
}

}  // namespace troupe
