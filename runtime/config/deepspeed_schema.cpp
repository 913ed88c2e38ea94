#include "runtime/config/deepspeed_schema.hpp"

#include <map>

namespace troupe {
namespace {

using K = DeepSpeedRule::Kind;

// DeepSpeed's keys as of its current runtime/config.py, runtime/zero/config.py and
// offload_config.py, and the sections they read with pydantic models.
const std::vector<DeepSpeedRule>& rules() {
  static const std::vector<DeepSpeedRule> table = {
      // Top level.
      {"prescale_gradients", K::ignore,
       "troupe always divides each replica's loss by dp before the gradients are summed, which is what it "
       "asks"},
      {"gradient_predivide_factor", K::ignore,
       "troupe divides by dp once, before the sum; another split of the division only moves rounding"},
      {"gradient_allreduce_op", K::refuse_unless,
       "troupe averages gradients over the replicas; \"sum\" is not run", R"("mean")"},
      {"sparse_gradients", K::refuse_unless, "troupe reduces dense gradients only", "false"},
      {"disable_allgather", K::ignore, "troupe's ZeRO gathers what it needs its own way"},
      {"graph_harvesting", K::ignore, "troupe does not capture CUDA graphs"},
      {"managed_gradient_accumulation", K::ignore, "troupe accumulates micro-batches its own way"},
      {"seq_parallel_communication_data_type", K::ignore,
       "troupe's sequence parallelism moves activations in the model's dtype"},
      {"dataloader_drop_last", K::ignore, "troupe's loader draws an endless stream of samples"},
      {"use_data_before_expert_parallelism", K::ignore, "troupe has no expert parallelism"},
      {"log_level", K::ignore, "troupe logs with spdlog at its own level"},
      {"vocabulary_size", K::ignore, "the vocabulary is [model] vocab_size"},
      {"amp.enabled", K::refuse_unless, "NVIDIA Apex's AMP: use \"bf16\" or \"fp16\" instead", "false"},
      {"amp.", K::quiet, ""},
      {"torch_autocast.enabled", K::refuse_unless,
       "autocast: troupe runs bf16 or fp16 over fp32 masters (\"bf16\", \"fp16\")", "false"},
      {"torch_autocast.", K::quiet, ""},
      {"sparse_attention.", K::refuse, "troupe's attention is dense causal attention"},
      {"pipeline.", K::ignore, "troupe's pipeline is [parallel] pp with [pipeline] schedule and partition"},
      {"elasticity.enabled", K::refuse_unless, "troupe has no elastic batch sizes", "false"},
      {"elasticity.", K::quiet, ""},
      {"data_efficiency.enabled", K::refuse_unless, "troupe has no curriculum or data routing", "false"},
      {"data_efficiency.", K::quiet, ""},
      {"curriculum_learning.enabled", K::refuse_unless, "troupe has no curriculum learning", "false"},
      {"curriculum_learning.", K::quiet, ""},
      {"compression_training.", K::refuse, "troupe has no compression training"},
      {"eigenvalue.enabled", K::refuse_unless, "troupe computes no eigenvalues", "false"},
      {"eigenvalue.", K::quiet, ""},
      {"progressive_layer_drop.enabled", K::refuse_unless,
       "progressive layer drop: a trainer's own layer schedule does it (Trainable::schedule)", "false"},
      {"progressive_layer_drop.", K::quiet, ""},
      {"quantize_training.enabled", K::refuse_unless, "troupe has no quantized training", "false"},
      {"quantize_training.", K::quiet, ""},
      {"hybrid_engine.enabled", K::refuse_unless, "troupe has no inference engine", "false"},
      {"hybrid_engine.", K::quiet, ""},
      {"weight_quantization.", K::refuse, "troupe has no weight quantization"},
      {"expert_parallel.", K::refuse, "troupe has no mixture of experts"},
      {"compile.", K::ignore, "troupe does not compile the model"},
      {"timers.", K::ignore, "troupe's timeline is [trace] path"},
      {"nebula.", K::ignore, "troupe's checkpoints are [checkpoint]'s"},
      {"autotuning.", K::ignore, "troupe plans layouts with `troupe plan`"},
      {"checkpoint.", K::ignore,
       "troupe's checkpoints load into any layout (universal), written by every rank in parallel"},
      {"data_types.grad_accum_dtype", K::refuse_unless, "troupe accumulates gradients in the model's dtype",
       "null"},
      {"data_types.", K::ignore, "troupe keeps parameters in [precision] dtype over fp32 masters"},
      // AutoTP's tuning; its autotp_size is [parallel] tp (deepspeed.cpp).
      {"tensor_parallel.", K::quiet, ""},
      // fp16 / bf16 settings of DeepSpeed's implementation.
      {"bf16.immediate_grad_update", K::ignore, "troupe's bf16 updates after the step's reduction"},
      {"bf16.check_grad_overflow", K::ignore, "troupe checks the gradient norm of every step"},
      {"bf16.bf16_master_weights_and_grads", K::refuse_unless, "troupe keeps fp32 master weights", "false"},
      {"bf16.bf16_optimizer_states", K::refuse_unless, "troupe keeps the optimizer state in fp32", "false"},
      {"fp16.auto_cast", K::refuse_unless, "troupe casts the model itself, not the inputs", "false"},
      {"fp16.fp16_master_weights_and_grads", K::refuse_unless, "troupe keeps fp32 master weights", "false"},
      // ZeRO.
      {"zero_optimization.cpu_offload_use_pin_memory", K::ignore, "troupe pins its host buffers"},
      {"zero_optimization.model_persistence_threshold", K::ignore,
       "troupe keeps every tensor under param_persistence_threshold whole, with no total cap"},
      {"zero_optimization.stage3_model_persistence_threshold", K::ignore,
       "troupe keeps every tensor under param_persistence_threshold whole, with no total cap"},
      {"zero_optimization.module_granularity_threshold", K::ignore, "troupe fetches by layer"},
      {"zero_optimization.stage3_module_granularity_threshold", K::ignore, "troupe fetches by layer"},
      {"zero_optimization.use_all_reduce_for_fetch_params", K::ignore, "troupe fetches with all-gathers"},
      {"zero_optimization.stage3_use_all_reduce_for_fetch_params", K::ignore,
       "troupe fetches with all-gathers"},
      {"zero_optimization.allgather_sequential", K::ignore, "troupe orders its own gathers"},
      {"zero_optimization.stage3_allgather_sequential", K::ignore, "troupe orders its own gathers"},
      {"zero_optimization.legacy_stage1", K::refuse_unless, "troupe has one stage 1", "false"},
      {"zero_optimization.zero_hpz_partition_size", K::refuse_unless,
       "ZeRO++'s secondary partition (hpZ) is not in troupe", "1"},
      {"zero_optimization.zero_quantized_weights", K::refuse_unless,
       "ZeRO++'s quantized weights are not in troupe", "false"},
      {"zero_optimization.zero_quantized_nontrainable_weights", K::refuse_unless,
       "ZeRO++'s quantized weights are not in troupe", "false"},
      {"zero_optimization.zero_quantized_gradients", K::refuse_unless,
       "ZeRO++'s quantized gradients are not in troupe", "false"},
      {"zero_optimization.zeropp_loco_param", K::refuse_unless, "ZeRO++'s LoCo is not in troupe", "null"},
      {"zero_optimization.mics_shard_size", K::refuse_unless, "MiCS partitions are not in troupe", "-1"},
      {"zero_optimization.mics_hierarchical_params_gather", K::refuse_unless, "MiCS is not in troupe",
       "false"},
      {"zero_optimization.memory_efficient_linear", K::ignore,
       "troupe's linear layers keep what autograd keeps"},
      {"zero_optimization.pipeline_loading_checkpoint", K::ignore, "troupe loads checkpoints its own way"},
      {"zero_optimization.override_module_apply", K::ignore, "troupe does not wrap module.apply"},
      {"zero_optimization.log_trace_cache_warnings", K::ignore,
       "troupe's fetch plan logs nothing of the kind"},
      {"zero_optimization.enable_sanity_checks", K::ignore, "troupe checks its stage-3 plans always"},
      {"zero_optimization.save_muon_momentum_buffer_in_memory", K::ignore, "troupe has no Muon optimizer"},
      {"zero_optimization.leaf_module.", K::ignore, "troupe fetches by layer"},
      {"zero_optimization.zenflow.", K::refuse, "ZenFlow's asynchronous CPU updates are not in troupe"},
      {"zero_optimization.offload_optimizer.pipeline_read", K::ignore,
       "troupe's offload manager always reads the next sub-group's state while the current one updates"},
      {"zero_optimization.offload_optimizer.pipeline_write", K::ignore,
       "troupe's offload manager always writes the last sub-group's state while the next one updates"},
      {"zero_optimization.offload_optimizer.super_offload", K::refuse_unless, "SuperOffload is not in troupe",
       "false"},
      {"zero_optimization.offload_optimizer.cpuadam_cores_perc", K::ignore,
       "troupe's optimizer kernels use [train] threads"},
  };
  return table;
}

// Keys deepspeed.cpp converts or ignores by its own lists, and the sections, for did-you-mean.
const std::vector<std::string> kOtherPaths = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "steps_per_print",
    "communication_data_type",
    "wall_clock_breakdown",
    "memory_breakdown",
    "dump_state",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
    "optimizer",
    "optimizer.type",
    "optimizer.params",
    "optimizer.legacy_fusion",
    "scheduler",
    "scheduler.type",
    "scheduler.params",
    "fp16",
    "bf16",
    "bfloat16",
    "fp16.enabled",
    "bf16.enabled",
    "fp16.loss_scale",
    "fp16.initial_scale_power",
    "fp16.loss_scale_window",
    "fp16.hysteresis",
    "fp16.consecutive_hysteresis",
    "fp16.min_loss_scale",
    "zero_optimization",
    "zero_optimization.stage",
    "zero_optimization.contiguous_gradients",
    "zero_optimization.reduce_scatter",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.use_multi_rank_bucket_allreduce",
    "zero_optimization.allgather_partitions",
    "zero_optimization.allgather_bucket_size",
    "zero_optimization.overlap_comm",
    "zero_optimization.load_from_fp32_weights",
    "zero_optimization.elastic_checkpoint",
    "zero_optimization.offload_param",
    "zero_optimization.offload_optimizer",
    "zero_optimization.sub_group_size",
    "zero_optimization.cpu_offload",
    "zero_optimization.cpu_offload_param",
    "zero_optimization.prefetch_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.param_persistence_threshold",
    "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.max_live_parameters",
    "zero_optimization.stage3_max_live_parameters",
    "zero_optimization.max_reuse_distance",
    "zero_optimization.stage3_max_reuse_distance",
    "zero_optimization.gather_16bit_weights_on_model_save",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "zero_optimization.stage3_gather_fp16_weights_on_model_save",
    "zero_optimization.ignore_unused_parameters",
    "zero_optimization.round_robin_gradients",
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_optimizer.nvme_path",
    "zero_optimization.offload_optimizer.buffer_count",
    "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_optimizer.fast_init",
    "zero_optimization.offload_optimizer.ratio",
    "zero_optimization.offload_param.device",
    "zero_optimization.offload_param.nvme_path",
    "zero_optimization.offload_param.buffer_count",
    "zero_optimization.offload_param.buffer_size",
    "zero_optimization.offload_param.max_in_cpu",
    "zero_optimization.offload_param.pin_memory",
    "aio",
    "aio.block_size",
    "aio.queue_depth",
    "aio.thread_count",
    "aio.single_submit",
    "aio.overlap_events",
    "aio.intra_op_parallelism",
    "aio.use_gds",
    "activation_checkpointing",
    "activation_checkpointing.partition_activations",
    "activation_checkpointing.cpu_checkpointing",
    "activation_checkpointing.contiguous_memory_optimization",
    "activation_checkpointing.number_checkpoints",
    "activation_checkpointing.synchronize_checkpoint_boundary",
    "activation_checkpointing.profile",
    "tensorboard",
    "tensorboard.enabled",
    "tensorboard.output_path",
    "tensorboard.job_name",
    "wandb",
    "wandb.enabled",
    "wandb.team",
    "wandb.group",
    "wandb.project",
    "csv_monitor",
    "csv_monitor.enabled",
    "csv_monitor.output_path",
    "csv_monitor.job_name",
    "comet",
    "flops_profiler",
    "comms_logger",
    "tensor_parallel.autotp_size",
    "pipeline.stages",
    "pipeline.partition",
    "pipeline.seed_layers",
    "pipeline.activation_checkpoint_interval",
    "checkpoint.tag_validation",
    "checkpoint.load_universal",
    "checkpoint.use_node_local_storage",
    "checkpoint.parallel_write",
    "data_types.grad_accum_dtype",
};

}  // namespace

const DeepSpeedRule* deepspeed_rule(std::string_view path) {
  const DeepSpeedRule* best = nullptr;
  for (const DeepSpeedRule& rule : rules()) {
    if (rule.path == path) return &rule;
    const bool section = rule.path.back() == '.';
    const bool under = section && (path.substr(0, rule.path.size()) == rule.path ||
                                   path == rule.path.substr(0, rule.path.size() - 1));
    if (under && (!best || rule.path.size() > best->path.size())) best = &rule;
  }
  return best;
}

const std::vector<std::string>& deepspeed_schema_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> all = kOtherPaths;
    for (const DeepSpeedRule& rule : rules())
      all.emplace_back(rule.path.back() == '.' ? rule.path.substr(0, rule.path.size() - 1) : rule.path);
    return all;
  }();
  return paths;
}

std::optional<std::string_view> auto_from_job(std::string_view path) {
  static const std::map<std::string_view, std::string_view> keys = {
      {"train_batch_size", "batch.global_batch_size"},
      {"train_micro_batch_size_per_gpu", "batch.micro_batch_size"},
      {"gradient_accumulation_steps", "batch.gradient_accumulation_steps"},
      {"gradient_clipping", "optimizer.gradient_clipping"},
      {"optimizer.params.lr", "optimizer.lr"},
      {"optimizer.params.betas", "optimizer.betas"},
      {"optimizer.params.eps", "optimizer.eps"},
      {"optimizer.params.weight_decay", "optimizer.weight_decay"},
      {"scheduler.params.warmup_min_lr", "scheduler.warmup_min_lr"},
      {"scheduler.params.warmup_max_lr", "scheduler.warmup_max_lr"},
      {"scheduler.params.warmup_num_steps", "scheduler.warmup_num_steps"},
      {"scheduler.params.total_num_steps", "scheduler.total_num_steps"},
      {"fp16.enabled", "precision.dtype"},
      {"bf16.enabled", "precision.dtype"},
      {"zero_optimization.reduce_bucket_size", "zero.reduce_bucket_size"},
      {"zero_optimization.stage3_prefetch_bucket_size", "zero.prefetch_bucket_size"},
      {"zero_optimization.prefetch_bucket_size", "zero.prefetch_bucket_size"},
      {"zero_optimization.stage3_param_persistence_threshold", "zero.param_persistence_threshold"},
      {"zero_optimization.param_persistence_threshold", "zero.param_persistence_threshold"},
  };
  auto found = keys.find(path);
  if (found == keys.end()) return std::nullopt;
  return found->second;
}

}  // namespace troupe
