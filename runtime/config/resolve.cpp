#include "runtime/config/resolve.hpp"
#include "runtime/estimate.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <utility>

#include "optim/loss_scaler.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/table.hpp"
#include "pipeline/topology.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/config/resolve_data.hpp"
#include "runtime/config/scheduler.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/config/suggest.hpp"
#include "runtime/config/token.hpp"
#include "runtime/config/toml_text.hpp"
#include "runtime/model/hf_config.hpp"

namespace troupe {
namespace {

constexpr int64_t kByteVocabSize = 256;  // every byte is a token
constexpr int64_t kPortMax = 65535;

std::string shown(int64_t value) {
  return fmt::format("{}", value);
}
std::string shown(double value) {
  return toml_float(value);
}
std::string shown(const std::string& value) {
  return toml_string(value);
}
// Text shown as it is, e.g. an array written out by the caller.
struct Verbatim {
  std::string text;
};
std::string shown(const Verbatim& value) {
  return value.text;
}

// "<where>: [section] key must be <expect>, got <value>" unless `ok`.
template <class T>
Status require(bool ok, const ConfigOrigins& origins, std::string_view section, std::string_view key,
               const T& value) {
  if (ok) return {};
  return key_error(origins, section, key,
                   fmt::format("{} must be {}, got {}", key, expect_of(section, key), shown(value)));
}

bool positive(double value) {
  return std::isfinite(value) && value > 0;
}
bool non_negative(double value) {
  return std::isfinite(value) && value >= 0;
}
// Upper bounds: each keeps the arithmetic derived from a key (bytes = elements × 4, the
// model's shapes multiplied) inside 64 bits and every wait, thread count and buffer count
// finite; the memory a job may take is checked against the host separately (host_check).
constexpr int64_t kRanksMax = int64_t{1} << 16;
constexpr double kSecondsMax = 86400;
constexpr int64_t kElementsMax = int64_t{1} << 40;
bool in_range(int64_t value, int64_t low, int64_t high) {
  return value >= low && value <= high;
}
bool positive_seconds(double value) {
  return positive(value) && value <= kSecondsMax;
}
bool unit_interval(double value) {
  return value >= 0 && value < 1;
}  // false for NaN

// "host:port" or "[v6-address]:port" with a port from 1 to 65535.
bool is_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  const bool bracketed = host.front() == '[' && host.back() == ']' && host.size() > 2;
  if (!bracketed && host.find_first_of(":[]") != std::string::npos) return false;
  if (port.empty() || port.size() > 5) return false;
  if (port.find_first_not_of("0123456789") != std::string::npos) return false;
  const int64_t number = std::stoll(port);
  return number >= 1 && number <= kPortMax;
}

Status resolve_cluster(ClusterConfig& cluster, const ConfigOrigins& origins) {
  TROUPE_TRY(
      require(is_host_port(cluster.coordinator), origins, "cluster", "coordinator", cluster.coordinator));
  auto secret = resolve_token(cluster, origins);
  if (!secret) return secret.error();
  cluster.secret = std::move(secret).value();
  if (cluster.share_gpus && cluster.device != DeviceKind::cuda)
    return key_error(
        origins, "cluster", "share_gpus",
        "share_gpus = true shares GPUs among ranks, but [cluster] device = \"cpu\": set device = "
        "\"cuda\" or drop share_gpus");
  const std::pair<const char*, double> timeouts[] = {{"bootstrap_timeout_s", cluster.bootstrap_timeout_s},
                                                     {"peer_timeout_s", cluster.peer_timeout_s},
                                                     {"collective_timeout_s", cluster.collective_timeout_s}};
  for (const auto& [key, seconds] : timeouts) {
    TROUPE_TRY(require(positive_seconds(seconds), origins, "cluster", key, seconds));
  }
  return {};
}

Status resolve_parallel(JobConfig& config, const ConfigOrigins& origins) {
  ParallelConfig& parallel = config.parallel;
  int64_t& world_size = config.cluster.world_size;
  TROUPE_TRY(require(in_range(parallel.pp, 1, kRanksMax), origins, "parallel", "pp", parallel.pp));
  TROUPE_TRY(require(in_range(parallel.tp, 1, kRanksMax), origins, "parallel", "tp", parallel.tp));
  TROUPE_TRY(require(in_range(world_size, 0, kRanksMax), origins, "cluster", "world_size", world_size));
  TROUPE_TRY(require(in_range(parallel.dp, 0, kRanksMax), origins, "parallel", "dp", parallel.dp));
  int64_t model_ranks = 0;
  if (__builtin_mul_overflow(parallel.pp, parallel.tp, &model_ranks) || model_ranks > kRanksMax)
    return key_error(origins, "parallel", "tp",
                     fmt::format("pp {} × tp {} is more ranks than troupe runs ({})", parallel.pp,
                                 parallel.tp, kRanksMax));
  if (world_size == 0 && parallel.dp == 0) parallel.dp = 1;
  if (world_size == 0) {
    world_size = parallel.dp * model_ranks;
  } else if (parallel.dp == 0) {
    if (world_size % model_ranks != 0) {
      return key_error(origins, "cluster", "world_size",
                       fmt::format("world_size = {} is not divisible by pp {} × tp {} = {}, "
                                   "so dp cannot be derived",
                                   world_size, parallel.pp, parallel.tp, model_ranks));
    }
    parallel.dp = world_size / model_ranks;
  } else if (world_size != parallel.dp * model_ranks) {
    return key_error(origins, "cluster", "world_size",
                     fmt::format("world_size = {} does not equal dp {} × pp {} × tp {} = {}", world_size,
                                 parallel.dp, parallel.pp, parallel.tp, parallel.dp * model_ranks));
  }
  return {};
}

// DeepSpeed's zero_optimization keys; sizes count elements.
Status resolve_zero(const ZeroConfig& zero, const ConfigOrigins& origins) {
  TROUPE_TRY(require(ZeroPolicy::for_stage(zero.stage).ok(), origins, "zero", "stage", zero.stage));
  const std::pair<const char*, int64_t> positive_sizes[] = {
      {"reduce_bucket_size", zero.reduce_bucket_size},
      {"prefetch_bucket_size", zero.prefetch_bucket_size},
      {"max_live_parameters", zero.max_live_parameters}};
  for (const auto& [key, value] : positive_sizes) {
    TROUPE_TRY(require(in_range(value, 1, kElementsMax), origins, "zero", key, value));
  }
  const std::pair<const char*, int64_t> non_negative_sizes[] = {
      {"max_reuse_distance", zero.max_reuse_distance},
      {"param_persistence_threshold", zero.param_persistence_threshold}};
  for (const auto& [key, value] : non_negative_sizes) {
    TROUPE_TRY(require(in_range(value, 0, kElementsMax), origins, "zero", key, value));
  }
  return {};
}

// At stage 0 the shard owner holds the whole model's optimizer state: [offload] moves all
// of it to the host tier (a GPU rank's ZeRO-Offload) or to NVMe.
Status resolve_offload(const OffloadConfig& o, const ZeroPolicy& zero, const ConfigOrigins& origins) {
  if (o.param != OffloadTier::none && !zero.partitions_parameters())
    return key_error(origins, "offload", "param",
                     fmt::format("param = \"{}\" needs [zero] stage = 3 (only stage 3 partitions the "
                                 "parameters), got stage {}",
                                 name_of(o.param), zero.stage()));
  if (o.param == OffloadTier::nvme && o.optimizer == OffloadTier::none)
    return key_error(
        origins, "offload", "param",
        "param = \"nvme\" needs optimizer = \"cpu\" or \"nvme\": the offload manager updates the "
        "parameters it swaps in from NVMe, so the optimizer must run there too");
  for (const char* key : {"optimizer", "param"}) {
    const OffloadTier tier = std::string(key) == "optimizer" ? o.optimizer : o.param;
    if (tier == OffloadTier::nvme && o.nvme_path.empty())
      return key_error(origins, "offload", key,
                       fmt::format("{} = \"nvme\" needs nvme_path, the directory of the nvme tier, but "
                                   "nvme_path is not set",
                                   key));
  }
  TROUPE_TRY(require(in_range(o.host_budget_bytes, 0, int64_t{1} << 50), origins, "offload",
                     "host_budget_bytes", o.host_budget_bytes));
  TROUPE_TRY(require(in_range(o.sub_group_size, 1, kElementsMax), origins, "offload", "sub_group_size",
                     o.sub_group_size));
  TROUPE_TRY(require(in_range(o.buffer_count, 2, 64), origins, "offload", "buffer_count", o.buffer_count));
  TROUPE_TRY(require(in_range(o.block_size, 1, int64_t{1} << 30) && o.block_size % 4096 == 0, origins,
                     "offload", "block_size", o.block_size));
  TROUPE_TRY(
      require(o.queue_depth >= 1 && o.queue_depth <= 1024, origins, "offload", "queue_depth", o.queue_depth));
  return {};
}

// Sets *unknown = global / (known × dp), which must be a positive integer.
Status derive_batch_factor(const BatchConfig& batch, int64_t dp, const char* known_key, int64_t known,
                           const char* unknown_key, int64_t* unknown, const ConfigOrigins& origins) {
  int64_t divisor = 0;
  if (__builtin_mul_overflow(known, dp, &divisor) || batch.global_batch_size % divisor != 0) {
    return key_error(origins, "batch", "global_batch_size",
                     fmt::format("global_batch_size = {} is not a multiple of {} {} × dp {} "
                                 "= {}, so {} cannot be derived",
                                 batch.global_batch_size, known_key, known, dp,
                                 static_cast<long double>(known) * dp, unknown_key));
  }
  *unknown = batch.global_batch_size / divisor;
  return {};
}

// micro × accumulation × dp, or an error when it does not fit in 64 bits.
Result<int64_t> batch_product(const BatchConfig& batch, int64_t dp, const ConfigOrigins& origins) {
  int64_t per_rank = 0;
  int64_t global = 0;
  if (__builtin_mul_overflow(batch.micro_batch_size, batch.gradient_accumulation_steps, &per_rank) ||
      __builtin_mul_overflow(per_rank, dp, &global)) {
    return key_error(origins, "batch", "micro_batch_size",
                     fmt::format("micro_batch_size {} × gradient_accumulation_steps {} × dp {} "
                                 "does not fit in a 64-bit integer",
                                 batch.micro_batch_size, batch.gradient_accumulation_steps, dp));
  }
  return global;
}

Error batch_unset_error(const BatchConfig& batch, const ConfigOrigins& origins) {
  const char* rule = "(global = micro × accumulation × dp)";
  if (batch.gradient_accumulation_steps > 0) {
    return key_error(origins, "batch", "gradient_accumulation_steps",
                     fmt::format("only gradient_accumulation_steps is set; also set "
                                 "micro_batch_size or global_batch_size {}",
                                 rule));
  }
  return key_error(origins, "batch", "micro_batch_size",
                   fmt::format("no batch size is set; set micro_batch_size, or two of "
                               "micro_batch_size, gradient_accumulation_steps and "
                               "global_batch_size {}",
                               rule));
}

// DeepSpeed's rule global = micro × accumulation × dp: any two determine the third.
// micro_batch_size = "auto": the largest micro-batch for now, with no accumulation; the
// end of resolve_config chooses among the divisors once the whole job is known.
Status resolve_auto_batch(JobConfig& config, const ConfigOrigins& origins) {
  BatchConfig& batch = config.batch;
  const int64_t dp = config.parallel.dp;
  TROUPE_TRY(require(in_range(batch.memory_budget_bytes, 0, int64_t{1} << 50), origins, "batch",
                     "memory_budget_bytes", batch.memory_budget_bytes));
  if (batch.micro_batch_size > 0 && batch.gradient_accumulation_steps > 0 &&
      batch.micro_batch_size * batch.gradient_accumulation_steps * dp == batch.global_batch_size)
    return {};  // chosen already: a resolved job resolved again (the engine does)
  if (batch.global_batch_size <= 0 || batch.global_batch_size > (int64_t{1} << 40))
    return key_error(
        origins, "batch", "micro_batch_size",
        "micro_batch_size = \"auto\" chooses within the global batch: set global_batch_size (1 to 2^40)");
  if (batch.gradient_accumulation_steps != 0)
    return key_error(origins, "batch", "gradient_accumulation_steps",
                     "micro_batch_size = \"auto\" chooses gradient_accumulation_steps too: leave it out");
  if (batch.global_batch_size % dp != 0)
    return key_error(origins, "batch", "global_batch_size",
                     fmt::format("global_batch_size = {} does not divide among dp = {} replicas",
                                 batch.global_batch_size, dp));
  batch.micro_batch_size = batch.global_batch_size / dp;
  batch.gradient_accumulation_steps = 1;
  return {};
}

Status resolve_batch(JobConfig& config, const ConfigOrigins& origins) {
  BatchConfig& batch = config.batch;
  const int64_t dp = config.parallel.dp;
  if (batch.micro_batch_auto) return resolve_auto_batch(config, origins);
  const std::tuple<const char*, int64_t, int> given[] = {
      {"micro_batch_size", batch.micro_batch_size, 20},
      {"gradient_accumulation_steps", batch.gradient_accumulation_steps, 20},
      {"global_batch_size", batch.global_batch_size, 40}};
  for (const auto& [key, value, bits] : given) {
    TROUPE_TRY(require(in_range(value, 0, int64_t{1} << bits), origins, "batch", key, value));
  }
  const bool has_micro = batch.micro_batch_size > 0;
  const bool has_global = batch.global_batch_size > 0;
  if (!has_micro && !has_global) return batch_unset_error(batch, origins);
  if (batch.gradient_accumulation_steps == 0 && !(has_micro && has_global)) {
    batch.gradient_accumulation_steps = 1;  // only micro or only global was given
  }
  if (!has_micro) {
    return derive_batch_factor(batch, dp, "gradient_accumulation_steps", batch.gradient_accumulation_steps,
                               "micro_batch_size", &batch.micro_batch_size, origins);
  }
  if (batch.gradient_accumulation_steps == 0) {
    return derive_batch_factor(batch, dp, "micro_batch_size", batch.micro_batch_size,
                               "gradient_accumulation_steps", &batch.gradient_accumulation_steps, origins);
  }
  Result<int64_t> product = batch_product(batch, dp, origins);
  if (!product.ok()) return product.error();
  if (!has_global) {
    batch.global_batch_size = *product;
  } else if (batch.global_batch_size != *product) {
    return key_error(origins, "batch", "global_batch_size",
                     fmt::format("global_batch_size = {} does not equal micro_batch_size {} × "
                                 "gradient_accumulation_steps {} × dp {} = {}",
                                 batch.global_batch_size, batch.micro_batch_size,
                                 batch.gradient_accumulation_steps, dp, *product));
  }
  return {};
}

Status resolve_optimizer(const OptimizerConfig& optimizer, const ConfigOrigins& origins) {
  TROUPE_TRY(require(positive(optimizer.lr), origins, "optimizer", "lr", optimizer.lr));
  TROUPE_TRY(
      require(unit_interval(optimizer.beta1) && unit_interval(optimizer.beta2), origins, "optimizer", "betas",
              Verbatim{fmt::format("[{}, {}]", toml_float(optimizer.beta1), toml_float(optimizer.beta2))}));
  TROUPE_TRY(require(positive(optimizer.eps), origins, "optimizer", "eps", optimizer.eps));
  TROUPE_TRY(require(non_negative(optimizer.weight_decay), origins, "optimizer", "weight_decay",
                     optimizer.weight_decay));
  TROUPE_TRY(require(non_negative(optimizer.momentum), origins, "optimizer", "momentum", optimizer.momentum));
  if (optimizer.nesterov && optimizer.momentum == 0) {
    return key_error(origins, "optimizer", "nesterov",
                     "nesterov = true needs a positive momentum, got momentum 0");
  }
  TROUPE_TRY(require(non_negative(optimizer.gradient_clipping), origins, "optimizer", "gradient_clipping",
                     optimizer.gradient_clipping));
  return {};
}

// [scheduler]: each key in its range, then the schedule made over the optimizer (a missing
// key a schedule needs, an unknown type or warm-up kind), blamed on the key it names.
Status resolve_scheduler(const JobConfig& job, const ConfigOrigins& origins) {
  const SchedulerConfig& s = job.scheduler;
  for (const auto& [key, value] : {std::pair{"warmup_min_lr", s.warmup_min_lr},
                                   {"warmup_min_ratio", s.warmup_min_ratio},
                                   {"cos_min_ratio", s.cos_min_ratio},
                                   {"decay_lr_rate", s.decay_lr_rate},
                                   {"decay_mom_rate", s.decay_mom_rate}})
    TROUPE_TRY(require(non_negative(value), origins, "scheduler", key, value));
  for (const auto& [key, value] : {std::pair{"warmup_max_lr", s.warmup_max_lr},
                                   {"cycle_min_lr", s.cycle_min_lr},
                                   {"cycle_max_lr", s.cycle_max_lr}})
    TROUPE_TRY(require(value == -1 || non_negative(value), origins, "scheduler", key, value));
  for (const auto& [key, value] :
       {std::pair{"cycle_min_mom", s.cycle_min_mom}, {"cycle_max_mom", s.cycle_max_mom}})
    TROUPE_TRY(require(unit_interval(value), origins, "scheduler", key, value));
  TROUPE_TRY(require(in_range(s.warmup_num_steps, 1, int64_t{1} << 40), origins, "scheduler",
                     "warmup_num_steps", s.warmup_num_steps));
  TROUPE_TRY(require(in_range(s.total_num_steps, -1, int64_t{1} << 40), origins, "scheduler",
                     "total_num_steps", s.total_num_steps));
  TROUPE_TRY(require(in_range(s.cycle_first_step_size, 1, int64_t{1} << 40), origins, "scheduler",
                     "cycle_first_step_size", s.cycle_first_step_size));
  TROUPE_TRY(require(in_range(s.cycle_second_step_size, -1, int64_t{1} << 40), origins, "scheduler",
                     "cycle_second_step_size", s.cycle_second_step_size));
  TROUPE_TRY(require(in_range(s.decay_step_size, 0, int64_t{1} << 40), origins, "scheduler",
                     "decay_step_size", s.decay_step_size));
  auto made = make_lr_schedule(job);
  if (made) return {};
  const std::string& why = made.error().message;
  for (const char* key : {"warmup_type", "total_num_steps", "cycle_min_lr"})
    if (why.find(key) != std::string::npos)
      return key_error(origins, "scheduler", key, why.substr(why.find(']') + 2));
  return key_error(origins, "scheduler", "type", why.substr(why.find(']') + 2));
}

// The family's default MLP width: GPT-2's 4 × d_model; LLaMA's SwiGLU 2/3 of that,
// rounded up to a multiple of 256 (Meta's multiple_of). False when it would overflow.
bool default_d_ff(ModelConfig& model) {
  if (__builtin_mul_overflow(model.d_model, 8, &model.d_ff)) return false;
  if (model.type == "gpt")
    model.d_ff /= 2;
  else
    model.d_ff = (model.d_ff / 3 + 255) / 256 * 256;
  return true;
}

Status resolve_heads(ModelConfig& model, const ConfigOrigins& origins) {
  if (model.d_model % model.n_heads != 0) {
    return key_error(
        origins, "model", "n_heads",
        fmt::format("d_model = {} is not divisible by n_heads = {}", model.d_model, model.n_heads));
  }
  TROUPE_TRY(require(in_range(model.n_kv_heads, 0, model.n_heads), origins, "model", "n_kv_heads",
                     model.n_kv_heads));
  if (model.n_kv_heads == 0) model.n_kv_heads = model.n_heads;
  if (model.n_heads % model.n_kv_heads != 0)
    return key_error(origins, "model", "n_kv_heads",
                     fmt::format("n_kv_heads = {} does not divide n_heads = {}: each key/value head serves "
                                 "the same number of query heads",
                                 model.n_kv_heads, model.n_heads));
  if (model.type == "gpt" && model.n_kv_heads != model.n_heads)
    return key_error(origins, "model", "n_kv_heads",
                     fmt::format("n_kv_heads = {} with type = \"gpt\": the GPT attends with n_heads = {} "
                                 "key/value heads; grouped-query attention is type = \"llama\"'s",
                                 model.n_kv_heads, model.n_heads));
  if (model.type == "llama" && (model.d_model / model.n_heads) % 2 != 0)
    return key_error(origins, "model", "n_heads",
                     fmt::format("d_model / n_heads = {} is odd: the rotary embedding rotates pairs of a "
                                 "head's dimensions, so a head's width must be even",
                                 model.d_model / model.n_heads));
  return {};
}

// [model] init_from = a Hugging Face folder: each [model] key the job leaves out takes the
// folder's config.json value, so init_from alone describes the model. A job made in code
// (no origins) sets its fields itself.
Status take_shape_from_folder(ModelConfig& model, const ConfigOrigins& origins) {
  std::error_code ec;
  if (model.init_from.empty() || origins.source == "<struct>" ||
      !std::filesystem::exists(model.init_from + "/config.json", ec))
    return {};
  auto theirs = read_hf_config(model.init_from);
  if (!theirs) return key_error(origins, "model", "init_from", theirs.error().message);
  auto left_out = [&](const char* key) { return !origins.by_key.count(std::string("model.") + key); };
  if (left_out("type")) model.type = theirs->type;
  if (model.type != theirs->type) return {};  // the load names the difference
  for (auto [key, field, value] : {std::tuple{"vocab_size", &model.vocab_size, theirs->vocab_size},
                                   {"d_model", &model.d_model, theirs->d_model},
                                   {"n_layers", &model.n_layers, theirs->n_layers},
                                   {"n_heads", &model.n_heads, theirs->n_heads},
                                   {"n_kv_heads", &model.n_kv_heads, theirs->n_kv_heads},
                                   {"d_ff", &model.d_ff, theirs->d_ff}})
    if (left_out(key)) *field = value;
  if (left_out("rope_theta")) model.rope_theta = theirs->rope_theta;
  if (left_out("norm_eps")) model.norm_eps = theirs->norm_eps;
  if (left_out("tie_embeddings")) model.tie_embeddings = theirs->tie_embeddings;
  if (model.type == "gpt" && left_out("activation")) model.activation = theirs->activation;
  if (model.type == "gpt" && left_out("seq_len")) model.seq_len = theirs->seq_len;  // its learned positions
  return {};
}

Status resolve_model(ModelConfig& model, const ConfigOrigins& origins) {
  TROUPE_TRY(take_shape_from_folder(model, origins));
  static const std::vector<std::string> kFamilies = {"gpt", "llama"};
  if (std::find(kFamilies.begin(), kFamilies.end(), model.type) == kFamilies.end()) {
    const auto close = suggest(model.type, kFamilies);
    return key_error(origins, "model", "type",
                     fmt::format("type must be \"gpt\" or \"llama\", got {}{}", toml_string(model.type),
                                 close ? fmt::format("; did you mean \"{}\"?", *close) : ""));
  }
  TROUPE_TRY(require(in_range(model.vocab_size, kByteVocabSize, int64_t{1} << 24), origins, "model",
                     "vocab_size", model.vocab_size));
  const std::tuple<const char*, int64_t, int> sizes[] = {{"seq_len", model.seq_len, 20},
                                                         {"d_model", model.d_model, 17},
                                                         {"n_layers", model.n_layers, 14},
                                                         {"n_heads", model.n_heads, 12}};
  for (const auto& [key, value, bits] : sizes) {
    TROUPE_TRY(require(in_range(value, 1, int64_t{1} << bits), origins, "model", key, value));
  }
  TROUPE_TRY(resolve_heads(model, origins));
  TROUPE_TRY(require(positive(model.rope_theta), origins, "model", "rope_theta", model.rope_theta));
  TROUPE_TRY(require(unit_interval(model.norm_eps) && model.norm_eps > 0, origins, "model", "norm_eps",
                     model.norm_eps));
  TROUPE_TRY(require(model.activation == "gelu" || model.activation == "gelu_tanh", origins, "model",
                     "activation", model.activation));
  if (model.type == "llama" && model.activation != "gelu")
    return key_error(
        origins, "model", "activation",
        fmt::format("activation = {} with type = \"llama\": LLaMA's MLP gates with silu (SwiGLU)",
                    toml_string(model.activation)));
  TROUPE_TRY(require(in_range(model.d_ff, 0, int64_t{1} << 20), origins, "model", "d_ff", model.d_ff));
  if (model.d_ff == 0 && !default_d_ff(model)) {
    return key_error(origins, "model", "d_model",
                     fmt::format("d_model = {} is too large: the default d_ff does not fit "
                                 "in a 64-bit integer",
                                 model.d_model));
  }
  return {};
}

// [parallel] tp splits attention heads, the MLP's hidden width and the vocabulary across
// the group, and sequence parallelism the sequence: each must divide evenly.
Status resolve_tensor_parallel(const JobConfig& config, const ConfigOrigins& origins) {
  const int64_t tp = config.parallel.tp;
  const ModelConfig& m = config.model;
  const std::tuple<const char*, const char*, int64_t, const char*> splits[] = {
      {"n_heads", "n_heads", m.n_heads, "attention heads"},
      {"n_kv_heads", "n_kv_heads", m.n_kv_heads, "key/value heads"},
      {"d_ff", m.d_ff == 4 * m.d_model ? "d_model" : "d_ff", m.d_ff, "the MLP's hidden width"},
      {"vocab_size", "vocab_size", m.vocab_size, "the vocabulary"}};
  for (const auto& [name, key, value, what] : splits)
    if (value % tp != 0)
      return key_error(origins, "model", key,
                       fmt::format("{} = {} is not divisible by [parallel] tp = {}: tensor parallelism "
                                   "splits {} evenly across the group",
                                   name, value, tp, what));
  if (!config.parallel.sequence_parallel) return {};
  if (tp == 1)
    return key_error(origins, "parallel", "sequence_parallel",
                     "sequence_parallel = true needs tp > 1: it shards the sequence across a "
                     "tensor-parallel group");
  if (m.seq_len % tp != 0)
    return key_error(origins, "model", "seq_len",
                     fmt::format("seq_len = {} is not divisible by [parallel] tp = {}: sequence_parallel "
                                 "splits every sequence evenly across the group",
                                 m.seq_len, tp));
  return {};
}

Status resolve_train(const TrainConfig& train, const ConfigOrigins& origins) {
  TROUPE_TRY(require(in_range(train.steps, 1, int64_t{1} << 40), origins, "train", "steps", train.steps));
  TROUPE_TRY(require(in_range(train.log_interval, 1, int64_t{1} << 40), origins, "train", "log_interval",
                     train.log_interval));
  TROUPE_TRY(require(in_range(train.threads, 0, 1024), origins, "train", "threads", train.threads));
  TROUPE_TRY(
      require(in_range(train.max_restarts, 0, 1000), origins, "train", "max_restarts", train.max_restarts));
  TROUPE_TRY(require(in_range(train.eval_interval, 0, int64_t{1} << 40), origins, "train", "eval_interval",
                     train.eval_interval));
  TROUPE_TRY(require(in_range(train.eval_steps, 1, int64_t{1} << 20), origins, "train", "eval_steps",
                     train.eval_steps));
  return {};
}

Status resolve_monitor(const MonitorConfig& monitor, const ConfigOrigins& origins) {
  return require(in_range(monitor.queue, 1, int64_t{1} << 20), origins, "monitor", "queue", monitor.queue);
}

// "unknown X; did you mean Y?" or the list of allowed names.
std::string one_of(const std::string& got, const std::vector<std::string>& names) {
  if (auto close = suggest(got, names)) return fmt::format("got {}; did you mean {}?", toml_string(got), toml_string(*close));
  std::string allowed;
  for (const auto& name : names) allowed += (allowed.empty() ? "" : ", ") + toml_string(name);
  return fmt::format("got {}; the allowed values are {}", toml_string(got), allowed);
}

// Weights tied across virtual stages, and ZeRO stage 3 with split backwards, are not run.
Status check_runnable(const JobConfig& job, const ConfigOrigins& origins, std::string_view key,
                      int64_t chunks, bool split) {
  if (chunks > 1 && job.model.tie_embeddings)
    return key_error(
        origins, "pipeline", key,
        fmt::format("{} virtual stages per rank with [model] tie_embeddings = true: weights tied "
                    "across stages are summed between ranks, and with virtual stages two chunks of "
                    "one rank may hold one; untie them or use one chunk per rank",
                    chunks));
  if (split && job.zero.policy().gathers_before_use())
    return key_error(
        origins, "pipeline", key,
        "the schedule splits each backward into its input and weight halves, and [zero] stage = 3 "
        "gathers a layer's weights around one whole backward: use stage 0-2 with it, or \"1f1b\" "
        "with stage 3");
  return {};
}

// [pipeline] schedule_file: the table read and checked by the simulated executor now, so
// a bad one stops the job before any rank starts.
Status resolve_schedule_file(const JobConfig& job, const ConfigOrigins& origins) {
  const PipelineConfig& p = job.pipeline;
  if (origins.by_key.count("pipeline.schedule"))
    return key_error(origins, "pipeline", "schedule_file",
                     "schedule_file and schedule are both set; set one of them");
  const int64_t chunks = p.virtual_stages > 0 ? p.virtual_stages : 1;
  const pipeline::Layout layout{job.parallel.pp, chunks, pipeline::ChunkLayout::interleaved};
  auto programs =
      pipeline::load_schedule_table(p.schedule_file, layout, job.batch.gradient_accumulation_steps);
  if (!programs) return key_error(origins, "pipeline", "schedule_file", programs.error().message);
  return check_runnable(job, origins, "schedule_file", chunks, pipeline::splits_backward(*programs));
}

// 1f1b and zb_h1 with fewer micro-batches than stages, blamed on the schedule where the
// file names it, else on pp.
Status too_few_micro_batches(const JobConfig& job, const ConfigOrigins& origins) {
  const std::string& schedule = job.pipeline.schedule;
  const int64_t micro = job.batch.gradient_accumulation_steps;
  if (origins.by_key.count("pipeline.schedule"))
    return key_error(
        origins, "pipeline", "schedule",
        fmt::format("schedule \"{}\" needs at least as many micro-batches as stages, but "
                    "[batch] gradient_accumulation_steps = {} is below [parallel] pp = {}; raise "
                    "gradient_accumulation_steps or use \"gpipe\"",
                    schedule, micro, job.parallel.pp));
  return key_error(
      origins, "parallel", "pp",
      fmt::format("pp = {} stages with schedule \"{}\" need at least {} micro-batches, but "
                  "[batch] gradient_accumulation_steps = {}; raise gradient_accumulation_steps or "
                  "use [pipeline] schedule = \"gpipe\"",
                  job.parallel.pp, schedule, job.parallel.pp, micro));
}

// The [pipeline] keys that do not depend on the model: the schedule (a name or a table)
// and its shape, and the partition's method or counts. The layer count is checked by
// check_pipeline_layers.
Status resolve_pipeline(const JobConfig& job, const ConfigOrigins& origins) {
  const PipelineConfig& p = job.pipeline;
  TROUPE_TRY(
      require(in_range(p.virtual_stages, 0, 64), origins, "pipeline", "virtual_stages", p.virtual_stages));
  if (!p.schedule_file.empty()) {
    if (job.parallel.pp > 1) TROUPE_TRY(resolve_schedule_file(job, origins));
  } else {
    const auto schedules = pipeline::schedule_names();
    if (std::find(schedules.begin(), schedules.end(), p.schedule) == schedules.end())
      return key_error(origins, "pipeline", "schedule",
                       fmt::format("schedule must be a schedule's name, {}", one_of(p.schedule, schedules)));
    const int64_t micro = job.batch.gradient_accumulation_steps;
    const int64_t chunks =
        p.virtual_stages > 0 ? p.virtual_stages : pipeline::default_virtual_stages(p.schedule);
    const pipeline::ScheduleShape shape{job.parallel.pp, micro, chunks};
    if (job.parallel.pp > 1) {
      if ((p.schedule == "1f1b" || p.schedule == "zb_h1") && micro < job.parallel.pp)
        return too_few_micro_batches(job, origins);
      if (auto ok = pipeline::check_shape(p.schedule, shape); !ok)
        return key_error(origins, "pipeline",
                         origins.by_key.count("pipeline.virtual_stages") ? "virtual_stages" : "schedule",
                         ok.error().message);
      TROUPE_TRY(
          check_runnable(job, origins, "schedule", chunks, p.schedule == "zb_h1" || p.schedule == "zbv"));
    }
  }
  const PipelinePartition& cut = p.partition;
  if (cut.counts.empty()) return {};  // a method, which the loader checked
  const int64_t chunks = pipeline_chunks(job);
  if (static_cast<int64_t>(cut.counts.size()) != job.parallel.pp * chunks)
    return key_error(origins, "pipeline", "partition",
                     chunks == 1
                         ? fmt::format("partition lists {} stages' layer counts but [parallel] pp = {}",
                                       cut.counts.size(), job.parallel.pp)
                         : fmt::format("partition lists {} chunks' layer counts but [parallel] pp = {} "
                                       "stages of {} virtual stages make {}",
                                       cut.counts.size(), job.parallel.pp, chunks, job.parallel.pp * chunks));
  for (std::size_t s = 0; s < cut.counts.size(); ++s)
    if (!in_range(cut.counts[s], 1, int64_t{1} << 20))
      return key_error(origins, "pipeline", "partition",
                       fmt::format("partition gives stage {} {} layers; every stage needs at least 1", s,
                                   cut.counts[s]));
  return {};
}

}  // namespace

Status check_pipeline_layers(const JobConfig& job, int64_t layers, const std::string& model) {
  const ConfigOrigins& origins = job.origins.source.empty() ? ConfigOrigins{job.source, {}} : job.origins;
  const int64_t pp = job.parallel.pp, chunks = pipeline_chunks(job);
  if (pp > layers)
    return key_error(origins, "parallel", "pp",
                     fmt::format("pp = {} stages, but {} has {} layers; each stage needs at least one", pp,
                                 model, layers));
  if (pp * chunks > layers)
    return key_error(
        origins, "pipeline", origins.by_key.count("pipeline.virtual_stages") ? "virtual_stages" : "schedule",
        fmt::format("pp = {} stages of {} virtual stages each cut the layers into {} chunks, but {} "
                    "has {} layers; each chunk needs at least one (lower virtual_stages)",
                    pp, chunks, pp * chunks, model, layers));
  const auto& counts = job.pipeline.partition.counts;
  if (counts.empty()) return {};
  int64_t sum = 0;
  for (int64_t c : counts) sum += c;
  if (sum != layers)
    return key_error(origins, "pipeline", "partition",
                     fmt::format("partition counts {} layers in all, but {} has {}", sum, model, layers));
  return {};
}

Result<JobConfig> resolve_config(JobConfig raw) {
  ConfigOrigins origins = raw.origins;  // a loaded config keeps its positions
  origins.source = raw.source;
  return resolve_config(std::move(raw), origins);
}

// [precision]: bf16 and fp16 on CPU ranks (LibTorch 2's CPU kernels have both).
Status resolve_precision(const JobConfig& raw, const ConfigOrigins& origins) {
  const PrecisionConfig& p = raw.precision;
  if (auto scaler = LossScaler::make(loss_scale_options(raw)); !scaler) {
    const std::string& why = scaler.error().message;
    return key_error(origins, "precision", why.substr(0, why.find(' ')), why);
  }
  const std::optional<Dtype> comm = p.communication_data_type;
  if (comm && *comm != p.dtype && *comm != Dtype::fp32)
    return key_error(origins, "precision", "communication_data_type",
                     fmt::format("communication_data_type = {} with dtype = {}: gradients are reduced in the "
                                 "dtype the model computes in or in fp32; leave it empty or set it to {} or "
                                 "\"fp32\"",
                                 toml_string(name_of(*comm)), toml_string(name_of(p.dtype)),
                                 toml_string(name_of(p.dtype))));
  if (p.dtype == Dtype::fp32) return {};
  if (raw.offload.param == OffloadTier::nvme)
    return key_error(origins, "precision", "dtype",
                     fmt::format("dtype = {} with [offload] param = \"nvme\": the parameter swap holds fp32 "
                                 "blocks so far; use param = \"none\" or dtype = \"fp32\"",
                                 toml_string(name_of(p.dtype))));
  return {};
}

// [checkpoint]: saving needs a folder; a save is the state troupe's own optimizer kernels
// keep on CPU ranks.
Status resolve_checkpoint(const JobConfig& raw, const ConfigOrigins& origins) {
  const CheckpointConfig& c = raw.checkpoint;
  TROUPE_TRY(require(in_range(c.every_steps, 0, int64_t{1} << 40), origins, "checkpoint", "every_steps",
                     c.every_steps));
  TROUPE_TRY(
      require(in_range(c.keep_last, 1, int64_t{1} << 20), origins, "checkpoint", "keep_last", c.keep_last));
  if (c.every_steps > 0 && c.dir.empty())
    return key_error(
        origins, "checkpoint", "every_steps",
        fmt::format("every_steps = {} needs a folder to save into: set [checkpoint] dir", c.every_steps));
  if (c.resume == "latest" && c.dir.empty())
    return key_error(origins, "checkpoint", "resume",
                     "resume = \"latest\" looks under [checkpoint] dir, which is not set; set dir or name "
                     "the checkpoint folder");
  return {};
}

// What the device path cannot run yet is refused at its key: parameters on a host or NVMe
// tier, and LibTorch's SGD with 16 bits or checkpoints are the host
// path's so far (tensor parallelism is refused with the model, Engine::run).
Status check_device_path(const JobConfig& raw, const ConfigOrigins& origins, const std::string& path) {
  if (raw.offload.param != OffloadTier::none)
    return key_error(origins, "offload", "param",
                     fmt::format("param = {} with {}: a GPU rank keeps its parameter partition in device "
                                 "memory so far (its optimizer state may go to the host or NVMe with "
                                 "[offload] optimizer); set param = \"none\"",
                                 toml_string(name_of(raw.offload.param)), path));
  // SGD on a GPU rank without a tier runs as LibTorch's optimizer: fp32 only, state unsaved.
  const bool torch_sgd =
      raw.optimizer.type == OptimizerType::sgd && raw.offload.optimizer == OffloadTier::none;
  const Dtype dtype = raw.precision.dtype;
  if (dtype != Dtype::fp32 && torch_sgd)
    return key_error(
        origins, "optimizer", "type",
        fmt::format("type = \"sgd\" with {} and dtype = {}: SGD on a GPU rank runs as LibTorch's "
                    "optimizer, without fp32 master weights; use adamw or adam, or [offload] "
                    "optimizer = \"cpu\" (troupe's kernels on the host)",
                    path, toml_string(name_of(dtype))));
  const CheckpointConfig& c = raw.checkpoint;
  const bool saves = c.every_steps > 0 || !c.resume.empty();
  if (saves && torch_sgd)
    return key_error(
        origins, "optimizer", "type",
        fmt::format("type = \"sgd\" with {} and [checkpoint]: SGD on a GPU rank runs as LibTorch's "
                    "optimizer, whose momentum troupe does not save; use adamw or adam, or "
                    "[offload] optimizer = \"cpu\" (troupe's kernels on the host)",
                    path));
  return {};
}

Result<JobConfig> resolve_config(JobConfig raw, const ConfigOrigins& origins) {
  const bool choose_micro = raw.batch.micro_batch_auto && raw.batch.micro_batch_size == 0;
  TROUPE_TRY(resolve_cluster(raw.cluster, origins));
  TROUPE_TRY(resolve_parallel(raw, origins));
  TROUPE_TRY(resolve_zero(raw.zero, origins));
  TROUPE_TRY(resolve_offload(raw.offload, raw.zero.policy(), origins));
  TROUPE_TRY(resolve_batch(raw, origins));
  TROUPE_TRY(resolve_optimizer(raw.optimizer, origins));
  TROUPE_TRY(resolve_scheduler(raw, origins));
  TROUPE_TRY(resolve_precision(raw, origins));
  TROUPE_TRY(resolve_model(raw.model, origins));
  TROUPE_TRY(resolve_tensor_parallel(raw, origins));
  TROUPE_TRY(resolve_data(raw, origins));
  TROUPE_TRY(resolve_train(raw.train, origins));
  TROUPE_TRY(resolve_monitor(raw.monitor, origins));
  TROUPE_TRY(resolve_pipeline(raw, origins));
  TROUPE_TRY(resolve_checkpoint(raw, origins));
  if (raw.cluster.device == DeviceKind::cuda)
    TROUPE_TRY(check_device_path(raw, origins, "[cluster] device = \"cuda\""));
  raw.origins = origins;
  if (choose_micro) TROUPE_TRY(choose_micro_batch(raw));
  return raw;
}

int64_t pipeline_chunks(const JobConfig& job) {
  const PipelineConfig& p = job.pipeline;
  if (job.parallel.pp == 1) return 1;
  if (p.virtual_stages > 0) return p.virtual_stages;
  return p.schedule_file.empty() ? pipeline::default_virtual_stages(p.schedule) : 1;
}

Result<std::vector<int64_t>> stage_layer_counts(const JobConfig& job,
                                                const std::vector<double>& layer_elements,
                                                const std::vector<double>& layer_costs) {
  const PipelinePartition& cut = job.pipeline.partition;
  const int64_t parts = job.parallel.pp * pipeline_chunks(job);
  if (!cut.counts.empty()) return cut.counts;  // checked against the model by check_pipeline_layers
  if (cut.method == PartitionMethod::uniform)
    return pipeline::partition_uniform(static_cast<int64_t>(layer_elements.size()), parts);
  const bool by_cost = (cut.method == PartitionMethod::profile || cut.method == PartitionMethod::flops) &&
                       !layer_costs.empty();
  if (by_cost && layer_costs.size() != layer_elements.size())
    return make_error(fmt::format("[pipeline] partition = \"{}\" has {} layer costs for a model of {} layers",
                                  name_of(cut.method), layer_costs.size(), layer_elements.size()));
  return pipeline::partition_balanced(by_cost ? layer_costs : layer_elements, parts);
}

}  // namespace troupe
