#include "runtime/config/schema.hpp"

#include <fmt/format.h>

#include "base/check.hpp"
#include "runtime/config/suggest.hpp"

namespace troupe {
namespace {

std::vector<KeySpec> make_key_specs() {
  using C = JobConfig;
  return {
      {"cluster", "world_size", "an integer from 0 to 65536 (0 = dp × pp × tp)",
       [](C& c) -> FieldRef { return &c.cluster.world_size; }},
      {"cluster", "coordinator", "a host:port string with a port from 1 to 65535",
       [](C& c) -> FieldRef { return &c.cluster.coordinator; }},
      {"cluster", "token", "a string of at most 1024 bytes (empty = token_file, or $TROUPE_TOKEN)",
       [](C& c) -> FieldRef { return &c.cluster.token; }, true},
      {"cluster", "token_file", "a path to a file whose first line is the token (empty = none)",
       [](C& c) -> FieldRef { return &c.cluster.token_file; }},
      {"cluster", "bootstrap_timeout_s", "a positive number of seconds up to 86400 (a day)",
       [](C& c) -> FieldRef { return &c.cluster.bootstrap_timeout_s; }},
      {"cluster", "peer_timeout_s", "a positive number of seconds up to 86400 (a day)",
       [](C& c) -> FieldRef { return &c.cluster.peer_timeout_s; }},
      {"cluster", "collective_timeout_s", "a positive number of seconds up to 86400 (a day)",
       [](C& c) -> FieldRef { return &c.cluster.collective_timeout_s; }},
      {"cluster", "topology", R"(one of "auto", "flat" or "two_level")",
       [](C& c) -> FieldRef { return choice_ref(&c.cluster.topology); }},
      {"cluster", "host_id", "a string (empty = this machine's host name and boot id)",
       [](C& c) -> FieldRef { return &c.cluster.host_id; }},
      {"cluster", "device", R"(one of "cpu" or "cuda")",
       [](C& c) -> FieldRef { return choice_ref(&c.cluster.device); }},
      {"cluster", "share_gpus", "true or false", [](C& c) -> FieldRef { return &c.cluster.share_gpus; }},

      {"parallel", "dp", "an integer from 0 to 65536 (0 = world_size / (pp × tp))",
       [](C& c) -> FieldRef { return &c.parallel.dp; }},
      {"parallel", "pp", "an integer from 1 to 65536 (pipeline stages)",
       [](C& c) -> FieldRef { return &c.parallel.pp; }},
      {"parallel", "tp", "an integer from 1 to 65536 (tensor-parallel ranks per layer)",
       [](C& c) -> FieldRef { return &c.parallel.tp; }},
      {"parallel", "sequence_parallel", "true or false (with tp > 1: shard the sequence between layers)",
       [](C& c) -> FieldRef { return &c.parallel.sequence_parallel; }},
      {"parallel", "order", R"(one of "pp,dp" or "dp,pp" (the fastest-varying axis first))",
       [](C& c) -> FieldRef { return choice_ref(&c.parallel.order); }},

      {"pipeline", "schedule",
       R"(one of "gpipe", "1f1b", "interleaved_1f1b", "zb_h1" or "zbv", or a registered scheduler's name)",
       [](C& c) -> FieldRef { return &c.pipeline.schedule; }},
      {"pipeline", "schedule_file",
       "a path to a CSV schedule table, one row of actions per stage (empty = none)",
       [](C& c) -> FieldRef { return &c.pipeline.schedule_file; }},
      {"pipeline", "virtual_stages",
       "an integer from 0 to 64 (model chunks per rank; 0 = the schedule's own)",
       [](C& c) -> FieldRef { return &c.pipeline.virtual_stages; }},
      {"pipeline", "partition",
       R"(one of "flops", "uniform", "parameters" or "profile", or an array of layer counts by stage)",
       [](C& c) -> FieldRef { return &c.pipeline.partition; }},

      {"zero", "stage", "one of 0, 1, 2 or 3", [](C& c) -> FieldRef { return &c.zero.stage; }},
      {"zero", "reduce_bucket_size", "a positive integer up to 2^40 (elements)",
       [](C& c) -> FieldRef { return &c.zero.reduce_bucket_size; }},
      {"zero", "overlap_comm", "true or false", [](C& c) -> FieldRef { return &c.zero.overlap_comm; }},
      {"zero", "prefetch_bucket_size", "a positive integer up to 2^40 (elements)",
       [](C& c) -> FieldRef { return &c.zero.prefetch_bucket_size; }},
      {"zero", "max_live_parameters", "a positive integer up to 2^40 (elements)",
       [](C& c) -> FieldRef { return &c.zero.max_live_parameters; }},
      {"zero", "max_reuse_distance", "an integer from 0 to 2^40 (elements)",
       [](C& c) -> FieldRef { return &c.zero.max_reuse_distance; }},
      {"zero", "param_persistence_threshold", "an integer from 0 to 2^40 (elements)",
       [](C& c) -> FieldRef { return &c.zero.param_persistence_threshold; }},

      {"offload", "optimizer", R"(one of "none", "cpu" or "nvme")",
       [](C& c) -> FieldRef { return choice_ref(&c.offload.optimizer); }},
      {"offload", "param", R"(one of "none", "cpu" or "nvme")",
       [](C& c) -> FieldRef { return choice_ref(&c.offload.param); }},
      {"offload", "nvme_path", "a directory path (needed when a tier is \"nvme\")",
       [](C& c) -> FieldRef { return &c.offload.nvme_path; }},
      {"offload", "host_budget_bytes", "an integer from 0 to 2^50 (bytes; 0 = no limit)",
       [](C& c) -> FieldRef { return &c.offload.host_budget_bytes; }},
      {"offload", "sub_group_size", "a positive integer up to 2^40 (elements)",
       [](C& c) -> FieldRef { return &c.offload.sub_group_size; }},
      {"offload", "buffer_count", "an integer from 2 to 64",
       [](C& c) -> FieldRef { return &c.offload.buffer_count; }},
      {"offload", "block_size", "a positive multiple of 4096 up to 2^30 (bytes)",
       [](C& c) -> FieldRef { return &c.offload.block_size; }},
      {"offload", "queue_depth", "an integer from 1 to 1024",
       [](C& c) -> FieldRef { return &c.offload.queue_depth; }},
      {"offload", "direct_io", R"(one of "prefer", "require" or "off")",
       [](C& c) -> FieldRef { return choice_ref(&c.offload.direct_io); }},

      {"batch", "micro_batch_size", "a positive integer up to 2^20, or \"auto\"",
       [](C& c) -> FieldRef {
         return MicroBatchRef{&c.batch.micro_batch_size, &c.batch.micro_batch_auto};
       }},
      {"batch", "gradient_accumulation_steps", "a positive integer up to 2^20",
       [](C& c) -> FieldRef { return &c.batch.gradient_accumulation_steps; }},
      {"batch", "global_batch_size", "a positive integer up to 2^40",
       [](C& c) -> FieldRef { return &c.batch.global_batch_size; }},
      {"batch", "memory_budget_bytes", "an integer from 0 to 2^50 (bytes; 0 = this machine's memory / ranks)",
       [](C& c) -> FieldRef { return &c.batch.memory_budget_bytes; }},

      {"optimizer", "type", R"(one of "adamw", "adam" or "sgd")",
       [](C& c) -> FieldRef { return choice_ref(&c.optimizer.type); }},
      {"optimizer", "lr", "a positive number", [](C& c) -> FieldRef { return &c.optimizer.lr; }},
      {"optimizer", "betas", "an array of two numbers [beta1, beta2], each at least 0 and below 1",
       [](C& c) -> FieldRef {
         return BetasRef{&c.optimizer.beta1, &c.optimizer.beta2};
       }},
      {"optimizer", "eps", "a positive number", [](C& c) -> FieldRef { return &c.optimizer.eps; }},
      {"optimizer", "weight_decay", "a non-negative number",
       [](C& c) -> FieldRef { return &c.optimizer.weight_decay; }},
      {"optimizer", "momentum", "a non-negative number",
       [](C& c) -> FieldRef { return &c.optimizer.momentum; }},
      {"optimizer", "nesterov", "true or false", [](C& c) -> FieldRef { return &c.optimizer.nesterov; }},
      {"optimizer", "gradient_clipping", "a non-negative number (0 = no clipping)",
       [](C& c) -> FieldRef { return &c.optimizer.gradient_clipping; }},

      {"scheduler", "type",
       R"(one of "WarmupLR", "WarmupDecayLR", "WarmupCosineLR" or "OneCycle" ("" = a constant lr))",
       [](C& c) -> FieldRef { return choice_ref(&c.scheduler.type); }},
      {"scheduler", "warmup_min_lr", "a non-negative number",
       [](C& c) -> FieldRef { return &c.scheduler.warmup_min_lr; }},
      {"scheduler", "warmup_max_lr", "a non-negative number, or -1 for the default",
       [](C& c) -> FieldRef { return &c.scheduler.warmup_max_lr; }},
      {"scheduler", "warmup_num_steps", "a positive integer",
       [](C& c) -> FieldRef { return &c.scheduler.warmup_num_steps; }},
      {"scheduler", "warmup_type", R"(one of "log" or "linear")",
       [](C& c) -> FieldRef { return choice_ref(&c.scheduler.warmup_type); }},
      {"scheduler", "total_num_steps",
       "a non-negative integer (required by WarmupDecayLR and WarmupCosineLR)",
       [](C& c) -> FieldRef { return &c.scheduler.total_num_steps; }},
      {"scheduler", "warmup_min_ratio", "a non-negative number",
       [](C& c) -> FieldRef { return &c.scheduler.warmup_min_ratio; }},
      {"scheduler", "cos_min_ratio", "a non-negative number",
       [](C& c) -> FieldRef { return &c.scheduler.cos_min_ratio; }},
      {"scheduler", "cycle_min_lr", "a non-negative number (required by OneCycle)",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_min_lr; }},
      {"scheduler", "cycle_max_lr", "a non-negative number (required by OneCycle)",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_max_lr; }},
      {"scheduler", "decay_lr_rate", "a non-negative number",
       [](C& c) -> FieldRef { return &c.scheduler.decay_lr_rate; }},
      {"scheduler", "cycle_first_step_size", "a positive integer",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_first_step_size; }},
      {"scheduler", "cycle_second_step_size", "a non-negative integer, or -1 for the first step size",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_second_step_size; }},
      {"scheduler", "cycle_first_stair_count", "an integer (0 or less: no stairs)",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_first_stair_count; }},
      {"scheduler", "cycle_second_stair_count", "an integer (-1: the first stair count)",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_second_stair_count; }},
      {"scheduler", "decay_step_size", "a non-negative integer",
       [](C& c) -> FieldRef { return &c.scheduler.decay_step_size; }},
      {"scheduler", "cycle_momentum", "true or false",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_momentum; }},
      {"scheduler", "cycle_min_mom", "a number from 0 to below 1",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_min_mom; }},
      {"scheduler", "cycle_max_mom", "a number from 0 to below 1",
       [](C& c) -> FieldRef { return &c.scheduler.cycle_max_mom; }},
      {"scheduler", "decay_mom_rate", "a non-negative number",
       [](C& c) -> FieldRef { return &c.scheduler.decay_mom_rate; }},

      {"precision", "dtype", R"(one of "fp32", "bf16" or "fp16")",
       [](C& c) -> FieldRef { return choice_ref(&c.precision.dtype); }},
      {"precision", "communication_data_type", R"(empty (the dtype), "fp32", "bf16" or "fp16")",
       [](C& c) -> FieldRef { return choice_ref(&c.precision.communication_data_type); }},
      {"precision", "loss_scaling", "true or false (fp16 always scales)",
       [](C& c) -> FieldRef { return &c.precision.loss_scaling; }},
      {"precision", "loss_scale", "0 (dynamic) or a finite static scale above 0",
       [](C& c) -> FieldRef { return &c.precision.loss_scale; }},
      {"precision", "initial_scale_power", "an integer from 0 to 126 (the first dynamic scale is 2^power)",
       [](C& c) -> FieldRef { return &c.precision.initial_scale_power; }},
      {"precision", "loss_scale_window", "a positive integer (clean steps before the scale doubles)",
       [](C& c) -> FieldRef { return &c.precision.loss_scale_window; }},
      {"precision", "hysteresis", "a positive integer (overflows absorbed before the scale halves)",
       [](C& c) -> FieldRef { return &c.precision.hysteresis; }},
      {"precision", "consecutive_hysteresis", "true or false",
       [](C& c) -> FieldRef { return &c.precision.consecutive_hysteresis; }},
      {"precision", "min_loss_scale", "a number above 0",
       [](C& c) -> FieldRef { return &c.precision.min_loss_scale; }},

      {"model", "type", R"("gpt" or "llama")", [](C& c) -> FieldRef { return &c.model.type; }},
      {"model", "vocab_size", "an integer from 256 (byte-level data) to 2^24",
       [](C& c) -> FieldRef { return &c.model.vocab_size; }},
      {"model", "seq_len", "a positive integer up to 2^20",
       [](C& c) -> FieldRef { return &c.model.seq_len; }},
      {"model", "d_model", "a positive integer up to 2^17",
       [](C& c) -> FieldRef { return &c.model.d_model; }},
      {"model", "n_layers", "a positive integer up to 2^14",
       [](C& c) -> FieldRef { return &c.model.n_layers; }},
      {"model", "n_heads", "a positive integer up to 2^12",
       [](C& c) -> FieldRef { return &c.model.n_heads; }},
      {"model", "n_kv_heads", "an integer from 0 to n_heads that divides it (0 = n_heads)",
       [](C& c) -> FieldRef { return &c.model.n_kv_heads; }},
      {"model", "d_ff", "an integer from 0 to 2^20 (0 = the family's default)",
       [](C& c) -> FieldRef { return &c.model.d_ff; }},
      {"model", "rope_theta", "a number above 0 (the rotary embedding's base)",
       [](C& c) -> FieldRef { return &c.model.rope_theta; }},
      {"model", "norm_eps", "a number above 0 and below 1",
       [](C& c) -> FieldRef { return &c.model.norm_eps; }},
      {"model", "activation", R"("gelu" or "gelu_tanh")",
       [](C& c) -> FieldRef { return &c.model.activation; }},
      {"model", "tie_embeddings", "true or false", [](C& c) -> FieldRef { return &c.model.tie_embeddings; }},
      {"model", "activation_checkpointing", "true or false",
       [](C& c) -> FieldRef { return &c.model.activation_checkpointing; }},
      {"model", "init_from", "a parameter file (troupe export's), a Hugging Face folder, or empty",
       [](C& c) -> FieldRef { return &c.model.init_from; }},

      {"data", "path", "a path to a readable file, or empty for a synthetic corpus",
       [](C& c) -> FieldRef { return &c.data.path; }},
      {"data", "synthetic_bytes", "an integer greater than seq_len + 1, up to 2^36 (64 GiB)",
       [](C& c) -> FieldRef { return &c.data.synthetic_bytes; }},
      {"data", "prefetch_micro_batches", "an integer from 1 to 1024",
       [](C& c) -> FieldRef { return &c.data.prefetch_micro_batches; }},
      {"data", "paths", "an array of megatron-core dataset prefixes (PREFIX.bin and PREFIX.idx), or empty",
       [](C& c) -> FieldRef { return &c.data.paths; }},
      {"data", "weights", "an array of positive numbers, one per path (empty = by size)",
       [](C& c) -> FieldRef { return &c.data.weights; }},
      {"data", "split",
       R"(the train, validation and test shares: an array of 1 to 3 numbers >= 0, or a string such as "969,30,1")",
       [](C& c) -> FieldRef { return &c.data.split; }},

      {"train", "steps", "a positive integer up to 2^40", [](C& c) -> FieldRef { return &c.train.steps; }},
      {"train", "seed", "an integer", [](C& c) -> FieldRef { return &c.train.seed; }},
      {"train", "log_interval", "a positive integer up to 2^40",
       [](C& c) -> FieldRef { return &c.train.log_interval; }},
      {"train", "threads", "an integer from 0 to 1024 (0 = automatic)",
       [](C& c) -> FieldRef { return &c.train.threads; }},
      {"train", "metrics_path", "a file path, or empty for no metrics",
       [](C& c) -> FieldRef { return &c.train.metrics_path; }},
      {"train", "max_restarts", "an integer from 0 to 1000",
       [](C& c) -> FieldRef { return &c.train.max_restarts; }},
      {"train", "eval_interval", "an integer from 0 to 2^40 (0 = no validation)",
       [](C& c) -> FieldRef { return &c.train.eval_interval; }},
      {"train", "eval_steps", "an integer from 1 to 2^20 (global batches of the validation split)",
       [](C& c) -> FieldRef { return &c.train.eval_steps; }},

      {"checkpoint", "dir", "a directory path (made if missing), or empty for no checkpoints",
       [](C& c) -> FieldRef { return &c.checkpoint.dir; }},
      {"checkpoint", "every_steps", "an integer from 0 to 2^40 (0 = never save)",
       [](C& c) -> FieldRef { return &c.checkpoint.every_steps; }},
      {"checkpoint", "keep_last", "an integer from 1 to 2^20",
       [](C& c) -> FieldRef { return &c.checkpoint.keep_last; }},
      {"checkpoint", "async", "true or false", [](C& c) -> FieldRef { return &c.checkpoint.async; }},
      {"checkpoint", "resume", R"(a checkpoint folder, "latest", or empty to start afresh)",
       [](C& c) -> FieldRef { return &c.checkpoint.resume; }},

      {"trace", "path", "a file path, or empty for no tracing",
       [](C& c) -> FieldRef { return &c.trace.path; }},

      {"monitor", "tensorboard", "a directory path (made if missing), or empty for no TensorBoard files",
       [](C& c) -> FieldRef { return &c.monitor.tensorboard; }},
      {"monitor", "csv", "a directory path (made if missing), or empty for no CSV files",
       [](C& c) -> FieldRef { return &c.monitor.csv; }},
      {"monitor", "queue", "an integer from 1 to 2^20 (records held while writing is behind)",
       [](C& c) -> FieldRef { return &c.monitor.queue; }},
  };
}

std::string join(const std::vector<std::string>& words, std::string_view before, std::string_view after) {
  std::string out;
  for (const std::string& word : words) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}{}{}", before, word, after);
  }
  return out;
}

}  // namespace

const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> specs = make_key_specs();
  return specs;
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {
      "cluster",   "parallel", "pipeline", "zero",  "offload",    "batch", "optimizer", "scheduler",
      "precision", "model",    "data",     "train", "checkpoint", "trace", "monitor"};
  return names;
}

std::vector<std::string> key_names(std::string_view section) {
  std::vector<std::string> names;
  for (const KeySpec& spec : key_specs()) {
    if (spec.section == section) names.emplace_back(spec.key);
  }
  return names;
}

const KeySpec* find_key(std::string_view section, std::string_view key) {
  for (const KeySpec& spec : key_specs()) {
    if (spec.section == section && spec.key == key) return &spec;
  }
  return nullptr;
}

std::string_view expect_of(std::string_view section, std::string_view key) {
  const KeySpec* spec = find_key(section, key);
  TROUPE_CHECK(spec != nullptr, "expect_of() of a key that is not in the schema");
  return spec->expect;
}

std::string unknown_section_message(std::string_view section) {
  if (auto close = suggest(section, section_names())) {
    return fmt::format("unknown section [{}]; did you mean [{}]?", section, *close);
  }
  return fmt::format("unknown section [{}]; the sections are {}", section, join(section_names(), "[", "]"));
}

std::string unknown_key_message(std::string_view section, std::string_view key) {
  if (auto close = suggest(key, key_names(section))) {
    return fmt::format("unknown key [{}] {}; did you mean {}?", section, key, *close);
  }
  for (const KeySpec& spec : key_specs()) {
    if (spec.key == key) {
      return fmt::format("unknown key [{}] {}; did you mean [{}] {}?", section, key, spec.section, key);
    }
  }
  return fmt::format("unknown key [{}] {}; the keys of [{}] are {}", section, key, section,
                     join(key_names(section), "", ""));
}

}  // namespace troupe
