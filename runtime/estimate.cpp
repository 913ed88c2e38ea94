#include "runtime/estimate.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "memory/offload_plan.hpp"
#include "memory/zero_plan.hpp"
#include "pipeline/schedule.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/config/resolve.hpp"
#include "runtime/metrics.hpp"
#include "runtime/model/model_flops.hpp"
#include "runtime/model/model_shape.hpp"

namespace troupe {
namespace {

constexpr int64_t kFloatBytes = 4;

int64_t optimizer_states_per_element(const OptimizerConfig& o) {
  switch (o.type) {
    case OptimizerType::adam:
    case OptimizerType::adamw:
      return 2;  // exp_avg and exp_avg_sq
    case OptimizerType::sgd:
      return o.momentum > 0 ? 1 : 0;  // the momentum buffer
  }
  return 2;
}

// "a + b/N" with the terms that are not zero; "0" when none is.
std::string formula_text(int64_t whole, int64_t divided) {
  if (divided == 0) return std::to_string(whole);
  std::string per_rank = std::to_string(divided) + "/N";
  return whole == 0 ? per_rank : std::to_string(whole) + " + " + per_rank;
}

double per_param(int64_t bytes, int64_t params) {
  return params > 0 ? static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
}

bool parameters_on_nvme(const JobConfig& job) {
  return job.zero.policy().partitions_parameters() && job.offload.param == OffloadTier::nvme;
}

// With an nvme tier the host holds, instead of what moved to disk, buffer_count swap
// buffers of the largest sub-group (the offload manager's rule, memory/offload_plan.hpp)
// and each store's bounce pages. Sub-groups of rows in memory carry the state when it is
// on NVMe; pieces of parameter rows on NVMe carry the parameters and that state.
Status move_to_nvme(const JobConfig& job, const ZeroPlan& plan, ModelStateEstimate& e) {
  const OffloadConfig& o = job.offload;
  auto states = static_cast<std::size_t>(optimizer_states_per_element(job.optimizer));
  bool state_on_nvme = o.optimizer == OffloadTier::nvme && states > 0,
       params_on_nvme = parameters_on_nvme(job);
  if (!state_on_nvme && !params_on_nvme) return {};
  auto limit = sub_group_limit(o.sub_group_size, o.host_budget_bytes, o.buffer_count, states);
  if (!limit) return limit.error();
  std::size_t piece = 0;
  if (params_on_nvme) {
    auto size =
        parameter_piece_size(o.sub_group_size, o.host_budget_bytes, o.buffer_count, states, state_on_nvme);
    if (!size) return size.error();
    piece = *size;
  }
  auto pages = [](std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  std::size_t largest = 0, on_nvme = 0;
  for (std::size_t k = 0; k < plan.layout.row_count(); ++k) {
    std::size_t block = plan.layout.row(k).block;
    bool row_on_nvme = params_on_nvme && !plan.persistent(k);
    std::size_t group = std::min(block, row_on_nvme ? piece : *limit);
    std::size_t state = state_on_nvme ? pages(group * states * sizeof(float)) : 0;
    std::size_t buffer = state + (row_on_nvme ? pages(group * sizeof(float)) : 0);
    if (buffer > 0) largest = std::max(largest, std::max<std::size_t>(buffer, 4096));
    if (row_on_nvme) on_nvme += block * sizeof(float);
  }
  int64_t swap = static_cast<int64_t>(largest) * o.buffer_count;
  int64_t& optimizer = e.bytes[MemoryKind::optimizer_state];
  if (state_on_nvme) e.nvme_optimizer_state_bytes = std::exchange(optimizer, 0);
  optimizer += swap;
  e.nvme_parameter_bytes = static_cast<int64_t>(on_nvme);
  e.bytes[MemoryKind::parameters] -= e.nvme_parameter_bytes;
  int stores = (state_on_nvme ? 1 : 0) + (params_on_nvme ? 1 : 0);
  e.bytes[MemoryKind::communication] += stores * o.queue_depth * 4096;  // bounce pages
  return {};
}

// Some of a model's layers (all of them, or one pipeline stage's), as their ranks lay them out.
struct LayerSet {
  std::vector<std::vector<std::size_t>> layers;    // by layer: the element counts of what it owns
  std::vector<std::vector<std::size_t>> borrowed;  // by layer: indices of earlier tensors it uses
  std::vector<bool> dedicated;                     // by tensor: a row of its own (tied across stages)
  int64_t parameters = 0;
};

// Stage [first, first + count) of `shape`'s layers as that stage holds them: a tensor an
// earlier stage owns becomes the stage's own copy (in a row of its own, as any tensor
// other stages use too), as the runtime's pipeline plan does.
LayerSet stage_slice(const ModelShape& shape, int64_t first, int64_t count) {
  std::vector<std::size_t> owner;  // by tensor: its layer
  std::vector<std::size_t> size;   // by tensor
  for (std::size_t layer = 0; layer < shape.layers.size(); ++layer)
    for (std::size_t n : shape.layers[layer]) owner.push_back(layer), size.push_back(n);
  const auto begin = static_cast<std::size_t>(first), end = static_cast<std::size_t>(first + count);
  auto inside = [&](std::size_t layer) { return layer >= begin && layer < end; };
  std::vector<bool> shared(owner.size(), false);  // used by a layer of another stage than its owner's
  for (std::size_t layer = 0; layer < shape.borrowed.size(); ++layer)
    for (std::size_t t : shape.borrowed[layer])
      if (inside(layer) != inside(owner[t])) shared[t] = true;
  LayerSet set;
  std::vector<int64_t> local(owner.size(), -1);  // by tensor: its index in this stage
  std::size_t next = 0;
  for (std::size_t layer = begin; layer < end; ++layer) {
    set.layers.emplace_back();
    set.borrowed.emplace_back();
    auto take = [&](std::size_t t) {
      local[t] = static_cast<int64_t>(next++);
      set.layers.back().push_back(size[t]);
      set.dedicated.push_back(shared[t]);
      set.parameters += static_cast<int64_t>(size[t]);
    };
    for (std::size_t t = 0; t < owner.size(); ++t)
      if (owner[t] == layer) take(t);
    if (layer < shape.borrowed.size())
      for (std::size_t t : shape.borrowed[layer]) {
        if (local[t] < 0)
          take(t);  // owned by another stage: this stage's copy
        else
          set.borrowed.back().push_back(static_cast<std::size_t>(local[t]));
      }
  }
  return set;
}

// Each layer's parameter elements, for the "parameters" partition.
std::vector<double> layer_elements(const ModelShape& shape) {
  std::vector<double> elements;
  for (const auto& layer : shape.layers) {
    double sum = 0;
    for (std::size_t n : layer) sum += static_cast<double>(n);
    elements.push_back(sum);
  }
  return elements;
}

// The activations stage `s` keeps at its peak (see StageEstimate::activation_bytes).
int64_t stage_activation_bytes(const JobConfig& job, int64_t s) {
  const int64_t pp = job.parallel.pp, m = job.batch.gradient_accumulation_steps;
  const int64_t tokens = job.batch.micro_batch_size * job.model.seq_len;
  const int64_t hidden = tokens * job.model.d_model * (job.precision.dtype == Dtype::fp32 ? kFloatBytes : 2);
  const int64_t input = s == 0 ? tokens * static_cast<int64_t>(sizeof(int64_t)) : hidden;
  const int64_t output = job.model.activation_checkpointing ? 0 : s == pp - 1 ? kFloatBytes : hidden;
  const int64_t held = job.pipeline.schedule == "gpipe" ? m : std::min(m, pp - s);
  return held * (input + output);
}

Result<ModelStateEstimate> estimate_layers(const JobConfig& job, const LayerSet& set) {
  ZeroPlanInput input;
  input.policy = job.zero.policy();
  input.dp = job.parallel.dp;
  input.reduce_bucket_size = static_cast<std::size_t>(job.zero.reduce_bucket_size);
  input.persistence_threshold = static_cast<std::size_t>(job.zero.param_persistence_threshold);
  if (parameters_on_nvme(job)) input.block_align = page_block_align;
  input.layers = set.layers;
  input.borrowed = set.borrowed;
  input.dedicated = set.dedicated;
  auto plan = plan_zero(input);
  if (!plan) return make_error(fmt::format("{}: cannot plan ZeRO: {}", job.source, plan.error().message));

  ModelStateInputs inputs;
  inputs.optimizer_states_per_element = optimizer_states_per_element(job.optimizer);
  inputs.bucket_buffers = job.zero.overlap_comm ? 2 : 1;
  inputs.limits.prefetch_bucket_size = static_cast<std::size_t>(job.zero.prefetch_bucket_size);
  inputs.limits.max_live_parameters = static_cast<std::size_t>(job.zero.max_live_parameters);
  inputs.limits.max_reuse_distance = static_cast<std::size_t>(job.zero.max_reuse_distance);
  const bool mixed = job.precision.dtype != Dtype::fp32;
  inputs.element_bytes = mixed ? 2 : kFloatBytes;
  inputs.master_copy = mixed;
  inputs.reduce_bytes = job.precision.reduce_dtype() == Dtype::fp32 ? kFloatBytes : inputs.element_bytes;

  ModelStateEstimate e;
  e.file = job.source;
  e.zero = job.zero.policy();
  e.dp = job.parallel.dp;
  e.tp = job.parallel.tp;
  e.params = set.parameters;
  // A CPU rank holds every kind in host memory; a GPU rank its parameters, gradients and
  // bucket slots on the device, and the optimizer state there too unless a tier takes it.
  e.tier = job.cluster.device == DeviceKind::cuda ? "device" : "host";
  e.dtype = job.precision.dtype;
  e.bytes = estimate_model_state(*plan, inputs);

  // The ZeRO paper's accounting: parameters and gradients of the dtype's size, optimizer
  // state 4 per state (K = 12 for Adam under mixed precision: the fp32 master copy and both
  // moments); stage 1 partitions the optimizer state, 2 the gradients too, 3 all.
  const int64_t item = inputs.element_bytes;
  const int64_t optimizer = kFloatBytes * (inputs.optimizer_states_per_element + (mixed ? 1 : 0));
  int64_t whole = 0, divided = 0;
  const std::pair<bool, int64_t> parts[] = {{e.zero.partitions_parameters(), item},
                                            {e.zero.partitions_gradients(), item},
                                            {e.zero.partitions_optimizer_state(), optimizer}};
  for (const auto& [partitioned, bytes] : parts) (partitioned ? divided : whole) += bytes;
  e.formula = formula_text(whole, divided);
  e.formula_bytes_per_param =
      static_cast<double>(whole) + static_cast<double>(divided) / static_cast<double>(e.dp);
  if (e.zero.gathers_before_use())
    e.live_window_elements = static_cast<int64_t>(stage3_peak_gathered(*plan, inputs.limits));
  TROUPE_TRY(move_to_nvme(job, *plan, e));
  if (e.tier == "device") {
    e.optimizer_state_tier = job.offload.optimizer == OffloadTier::none ? "device" : "host";
    e.device_bytes = e.bytes[MemoryKind::parameters] + e.bytes[MemoryKind::gradients] +
                     e.bytes[MemoryKind::communication] +
                     (e.optimizer_state_tier == "device" ? e.bytes[MemoryKind::optimizer_state] : 0);
  }
  return e;
}

// "1.25 GB", "310.0 MB", for messages.
std::string bytes_text(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  return b >= 1e9 ? fmt::format("{:.2f} GB", b / 1e9) : fmt::format("{:.1f} MB", b / 1e6);
}

}  // namespace

double autograd_block_bytes(const JobConfig& job) {
  const double s = static_cast<double>(job.model.seq_len),
               b = static_cast<double>(job.batch.micro_batch_size);
  const double h = static_cast<double>(job.model.d_model), a = static_cast<double>(job.model.n_heads);
  const double t = static_cast<double>(job.parallel.tp);
  const double width = job.precision.dtype == Dtype::fp32 ? 2.0 : 1.0;  // the count is for 16-bit values
  const bool sp = job.parallel.sequence_parallel;
  if (job.model.activation_checkpointing) return 2 * s * b * h * width / (sp ? t : 1);
  // Korthikanti et al.'s count, bytes per s·b·h of 16-bit values: what every rank of a
  // tensor-parallel group keeps whole (norm and projection inputs) and what it splits.
  // Attention through scaled_dot_product_attention keeps q, k, v, its output and a row
  // log-sum-exp (fp32), not the s × s scores and softmax (their 5·a·s/h term).
  double whole = 10, split = 24;
  if (job.model.type == "llama") {
    const double kv = static_cast<double>(job.model.n_kv_heads) / a,
                 f = static_cast<double>(job.model.d_ff) / h;
    whole = 8;                   // two RMSNorm inputs, q/k/v's and gate/up's inputs
    split = 6 + 4 * kv + 8 * f;  // q, k, v, attention output, o's input; gate, up, silu, down's input
  }
  const double linear = sp ? (whole + split) / t : whole + split / t;
  return s * b * h * linear * width + 4 * b * a * s / t;
}

namespace {

// peak_rank_bytes of `job` given its estimate `e`.
int64_t peak_of(const JobConfig& job, const ModelStateEstimate& e) {
  const double block = autograd_block_bytes(job);
  auto state = [](const MemoryBytes& m) { return m.model_state() + m[MemoryKind::communication]; };
  if (job.parallel.pp == 1)  // one micro-batch at a time: its boundary tensors and its blocks'
    return state(e.bytes) + stage_activation_bytes(job, 0) +
           static_cast<int64_t>(block * static_cast<double>(job.model.n_layers));
  int64_t most = 0;
  const int64_t m = job.batch.gradient_accumulation_steps, pp = job.parallel.pp;
  for (const StageEstimate& s : e.stages) {
    const int64_t stage = s.stage % pp, held = job.pipeline.schedule == "gpipe" ? m : std::min(m, pp - stage);
    const int64_t first_block = std::max<int64_t>(s.first_layer, 1);
    const int64_t blocks =
        std::max<int64_t>(0, std::min(s.first_layer + s.layers, job.model.n_layers + 1) - first_block);
    most = std::max(most, state(s.bytes) + s.activation_bytes +
                              static_cast<int64_t>(block * static_cast<double>(blocks * held)));
  }
  return most;
}

}  // namespace

Result<int64_t> peak_rank_bytes(const JobConfig& job) {
  auto e = estimate_job(job);
  if (!e) return e.error();
  return peak_of(job, *e);
}

Status check_fits_device(const JobConfig& job, int64_t free_bytes, int64_t ranks, const std::string& device) {
  auto e = estimate_job(job);
  if (!e) return e.error();
  const int64_t held = e->bytes.model_state() + e->bytes[MemoryKind::communication];
  const int64_t activations = std::max<int64_t>(0, peak_of(job, *e) - held);
  // Stage 3's gathered rows are on the device too, beyond the partition.
  const int64_t window = e->live_window_elements * (job.precision.dtype == Dtype::fp32 ? 4 : 2);
  const int64_t need = (e->device_bytes + window + activations) * ranks;
  if (need <= free_bytes) return {};
  std::vector<std::string> keys;
  if (!e->zero.partitions_parameters() && job.parallel.dp > 1)
    keys.push_back(fmt::format("a higher [zero] stage (now {})", e->zero.stage()));
  if (job.offload.optimizer == OffloadTier::none) keys.push_back("[offload] optimizer = \"cpu\" or \"nvme\"");
  if (job.batch.micro_batch_size > 1)
    keys.push_back(fmt::format("a smaller [batch] micro_batch_size (now {})", job.batch.micro_batch_size));
  if (!job.model.activation_checkpointing) keys.push_back("[model] activation_checkpointing = true");
  if (ranks > 1)
    keys.push_back(
        fmt::format("[cluster] share_gpus = false with a GPU per rank (now {} ranks share it)", ranks));
  return make_error(fmt::format(
      "{}: the job needs about {} of {}'s memory ({} of model state and buffers and {} of activations per "
      "rank{}), but it has {} for the job; {}",
      job.source, bytes_text(need), device, bytes_text(e->device_bytes + window), bytes_text(activations),
      ranks > 1 ? fmt::format(", {} ranks on it", ranks) : "", bytes_text(free_bytes),
      keys.empty() ? "the model does not fit this GPU at any setting troupe has"
                   : "to fit, set " + fmt::format("{}", fmt::join(keys, ", or "))));
}

Status choose_micro_batch(JobConfig& job) {
  const int64_t share = job.batch.global_batch_size / job.parallel.dp;
  const int64_t ranks = job.parallel.dp * job.parallel.pp * job.parallel.tp;
  const int64_t budget = job.batch.memory_budget_bytes > 0 ? job.batch.memory_budget_bytes
                                                           : static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) *
                                                                 ::sysconf(_SC_PAGE_SIZE) / ranks;
  const std::string where = job.origins.where("batch", "micro_batch_size");
  int64_t smallest_need = 0;
  for (int64_t micro = share; micro >= 1; --micro) {
    if (share % micro != 0) continue;
    JobConfig trial = job;
    trial.batch.micro_batch_size = micro;
    trial.batch.gradient_accumulation_steps = share / micro;
    if (trial.parallel.pp > 1 && trial.pipeline.schedule_file.empty() &&
        !pipeline::check_shape(
            trial.pipeline.schedule,
            {trial.parallel.pp, trial.batch.gradient_accumulation_steps, pipeline_chunks(trial)}))
      continue;  // too few micro-batches for the schedule
    auto need = peak_rank_bytes(trial);
    if (!need)
      return make_error(
          fmt::format("{}: [batch] micro_batch_size = \"auto\": {}", where, need.error().message));
    smallest_need = *need;
    if (*need > budget) continue;
    job.batch.micro_batch_size = micro;
    job.batch.gradient_accumulation_steps = share / micro;
    job.warnings.push_back(
        fmt::format("{}: [batch] micro_batch_size = \"auto\" chose {} (× {} accumulation steps): a rank "
                    "holds about {} of "
                    "its {} budget",
                    where, micro, share / micro, bytes_text(*need), bytes_text(budget)));
    return {};
  }
  return make_error(
      fmt::format("{}: [batch] micro_batch_size = \"auto\": no micro-batch fits; the smallest the "
                  "schedule runs needs {} per rank, more than memory_budget_bytes = {}",
                  where, bytes_text(smallest_need), bytes_text(budget)));
}

Result<ModelStateEstimate> estimate_job(const JobConfig& job) {
  // Shapes only: no tensor of the model is made. With tp > 1 a rank holds its shard.
  ModelShape shape = model_shape(job.model, job.parallel.tp);
  if (job.parallel.pp == 1) {
    auto e = estimate_layers(job, LayerSet{shape.layers, shape.borrowed, {}, shape.parameters});
    if (e) e->model_params = model_shape(job.model).parameters;
    return e;
  }
  TROUPE_TRY(check_model_pipeline(job));
  // "profile" cuts by times measured when the job starts: estimated with the "parameters" cut.
  std::string note =
      job.pipeline.partition.counts.empty() && job.pipeline.partition.method == PartitionMethod::profile
          ? "partition = \"profile\" cuts by times measured when the job starts; estimated "
            "here with the \"parameters\" cut"
          : "";
  auto counts = stage_layer_counts(job, layer_elements(shape), model_layer_costs(job));
  if (!counts)
    return make_error(fmt::format("{}: [pipeline] partition: {}", job.source, counts.error().message));
  std::vector<ModelStateEstimate> per_stage;
  std::vector<StageEstimate> stages;
  int64_t first = 0;
  for (std::size_t s = 0; s < counts->size(); ++s) {
    auto e = estimate_layers(job, stage_slice(shape, first, (*counts)[s]));
    if (!e) return e.error();
    stages.push_back(StageEstimate{static_cast<int64_t>(s), first, (*counts)[s], e->params,
                                   e->bytes.model_state(),
                                   stage_activation_bytes(job, static_cast<int64_t>(s)), e->bytes});
    per_stage.push_back(std::move(*e));
    first += (*counts)[s];
  }
  std::size_t heaviest = 0;
  for (std::size_t s = 1; s < stages.size(); ++s)
    if (stages[s].model_state_bytes > stages[heaviest].model_state_bytes) heaviest = s;
  ModelStateEstimate e = std::move(per_stage[heaviest]);
  e.pp = job.parallel.pp;
  e.stages = std::move(stages);
  e.heaviest = static_cast<int64_t>(heaviest);
  e.model_params = model_shape(job.model).parameters;  // the whole model, whatever tp splits
  e.partition_note = std::move(note);
  return e;
}

namespace {

// pp > 1: one line per stage, then which stage the table by kind describes.
std::string render_stages(const ModelStateEstimate& e) {
  std::string out = fmt::format("  {:>5}  {:>9}  {:>12}  {:>18}  {:>18}\n", "stage", "layers", "parameters",
                                "model states B", "activations B");
  for (const StageEstimate& s : e.stages)
    out += fmt::format("  {:>5}  {:>9}  {:>12}  {:>18}  {:>18}\n", s.stage,
                       fmt::format("{}-{}", s.first_layer, s.first_layer + s.layers - 1),
                       group_thousands(s.params), group_thousands(s.model_state_bytes),
                       group_thousands(s.activation_bytes));
  if (!e.partition_note.empty()) out += "  (" + e.partition_note + ")\n";
  out += fmt::format("stage {} holds the most; each of its ranks, by kind:\n", e.heaviest);
  return out;
}

}  // namespace

std::string render_estimate(const ModelStateEstimate& e) {
  std::string out =
      e.pp == 1 && e.tp > 1
          ? fmt::format(
                "{}: ZeRO stage {}, dp {}, tp {}, {} parameters, {} on each rank (its tensor-parallel "
                "shard)\n",
                e.file, e.zero.stage(), e.dp, e.tp, group_thousands(e.model_params),
                group_thousands(e.params))
      : e.pp == 1 ? fmt::format("{}: ZeRO stage {}, dp {}, {} parameters\n", e.file, e.zero.stage(), e.dp,
                                group_thousands(e.params))
                  : fmt::format(
                        "{}: ZeRO stage {}, dp {}, pp {}, {} parameters (activations: the stage's input "
                        "and output kept between forward and backward)\n",
                        e.file, e.zero.stage(), e.dp, e.pp, group_thousands(e.model_params)) +
                        render_stages(e);
  struct Row {
    std::string kind;
    int64_t bytes;
  };
  std::vector<Row> rows;
  for (MemoryKind k : {MemoryKind::parameters, MemoryKind::gradients, MemoryKind::optimizer_state,
                       MemoryKind::communication})
    rows.push_back({std::string(memory_kind_name(k)), e.bytes[k]});
  rows.push_back({"model states", e.bytes.model_state()});
  std::vector<std::string> tiers(rows.size(), e.tier);
  tiers[2] = e.optimizer_state_tier.empty() ? e.tier : e.optimizer_state_tier;
  if (tiers[2] != e.tier) tiers[4] = "";  // model states span the device and the host
  if (e.nvme_parameter_bytes > 0) {  // the parameter partition, on disk
    rows.push_back({"parameters", e.nvme_parameter_bytes});
    tiers.push_back("nvme");
  }
  if (e.nvme_optimizer_state_bytes > 0) {  // the state itself, on disk
    rows.push_back({"optimizer_state", e.nvme_optimizer_state_bytes});
    tiers.push_back("nvme");
  }
  const std::array<std::string, 4> heading{"kind", "tier", "bytes per rank", "bytes/param"};
  std::size_t kind_width = heading[0].size(), bytes_width = heading[2].size();
  for (const Row& r : rows) {
    kind_width = std::max(kind_width, r.kind.size());
    bytes_width = std::max(bytes_width, group_thousands(r.bytes).size());
  }
  std::size_t tier_width = std::max<std::size_t>(heading[1].size(), 6);
  for (const std::string& t : tiers) tier_width = std::max(tier_width, t.size());
  out += fmt::format("  {:<{}}  {:<{}}  {:>{}}  {:>11}\n", heading[0], kind_width, heading[1], tier_width,
                     heading[2], bytes_width, heading[3]);
  for (std::size_t i = 0; i < rows.size(); ++i)
    out +=
        fmt::format("  {:<{}}  {:<{}}  {:>{}}  {:>11.2f}\n", rows[i].kind, kind_width, tiers[i], tier_width,
                    group_thousands(rows[i].bytes), bytes_width, per_param(rows[i].bytes, e.params));
  if (e.tier == "device")
    out += fmt::format("  {:<{}}  {:<{}}  {:>{}}  {:>11.2f}\n", "on the device", kind_width, "device",
                       tier_width, group_thousands(e.device_bytes), bytes_width,
                       per_param(e.device_bytes, e.params));
  out += fmt::format("ZeRO formula ({}): {} = {:.2f} bytes/param at N = {}", name_of(e.dtype), e.formula,
                     e.formula_bytes_per_param, e.dp);
  if (e.zero.gathers_before_use())
    out +=
        fmt::format(", plus the live window: {} elements gathered at the peak ({:.2f} bytes/param)",
                    group_thousands(e.live_window_elements),
                    per_param((e.dtype == Dtype::fp32 ? kFloatBytes : 2) * e.live_window_elements, e.params));
  out += "\n";
  return out;
}

std::string estimate_json(const ModelStateEstimate& e) {
  nlohmann::json j = {
      {"file", e.file},
      {"stage", e.zero.stage()},
      {"dp", e.dp},
      {"params", e.params},
      {"tier", e.tier},
      {"parameters_bytes", e.bytes[MemoryKind::parameters]},
      {"gradients_bytes", e.bytes[MemoryKind::gradients]},
      {"optimizer_state_bytes", e.bytes[MemoryKind::optimizer_state]},
      {"communication_bytes", e.bytes[MemoryKind::communication]},
      {"model_state_bytes", e.bytes.model_state()},
      {"formula", e.formula},
      {"dtype", name_of(e.dtype)},
      {"formula_bytes_per_param", e.formula_bytes_per_param},
  };
  if (e.zero.gathers_before_use()) j["live_window_elements"] = e.live_window_elements;
  if (e.nvme_optimizer_state_bytes > 0) j["nvme_optimizer_state_bytes"] = e.nvme_optimizer_state_bytes;
  if (e.nvme_parameter_bytes > 0) j["nvme_parameter_bytes"] = e.nvme_parameter_bytes;
  if (e.tier == "device") {
    j["device_bytes"] = e.device_bytes;
    j["optimizer_state_tier"] = e.optimizer_state_tier;
  }
  if (e.tp > 1) {
    j["tp"] = e.tp;
    j["model_params"] = e.model_params;
  }
  if (e.pp > 1) {
    j["pp"] = e.pp;
    j["heaviest_stage"] = e.heaviest;
    j["model_params"] = e.model_params;
    nlohmann::json stages = nlohmann::json::array();
    for (const StageEstimate& s : e.stages)
      stages.push_back({{"stage", s.stage},
                        {"first_layer", s.first_layer},
                        {"layers", s.layers},
                        {"params", s.params},
                        {"model_state_bytes", s.model_state_bytes},
                        {"activation_bytes", s.activation_bytes}});
    j["stages"] = std::move(stages);
  }
  return j.dump();
}

}  // namespace troupe
