// The typed job configuration: one struct per TOML section, plain data with defaults.
//
// A JobConfig comes from load_file/load_string (TOML, see load.hpp) or is filled in by
// an embedding trainer; either way resolve() derives the missing values (world_size,
// dp, the batch triple) and validates the whole job before any rank starts.
// Every key is documented in docs/CONFIG.md.
// Thread safety: plain values; copy freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "memory/direct_io.hpp"
#include "memory/zero_policy.hpp"
#include "optim/lr_schedule.hpp"
#include "pipeline/topology.hpp"
#include "runtime/config/origins.hpp"
#include "transport/options.hpp"

namespace troupe {

// The keys whose value is one of a few names are enums here; runtime/config/choices.hpp
// holds their TOML spellings. A few are the layers' own (DirectIo, Topology, GridOrder,
// LrScheduleType, WarmupType). [pipeline] schedule stays a name: a trainer may register
// schedulers of its own (pipeline/schedule.hpp), so the set is open; the job's resolution
// checks it against the registry.

/// [cluster] device: where a rank computes.
enum class DeviceKind { cpu, cuda };
/// [pipeline] partition, when it is a method rather than the layer counts.
enum class PartitionMethod { flops, uniform, parameters, profile };
/// [offload] optimizer and param: where the optimizer state or the parameters live.
enum class OffloadTier { none, cpu, nvme };
/// [precision] dtype and communication_data_type.
enum class Dtype { fp32, bf16, fp16 };
/// [optimizer] type.
enum class OptimizerType { adamw, adam, sgd };

/// [cluster]: who takes part and how long anything may wait.
struct ClusterConfig {
  int64_t world_size = 0;                       ///< 0 = derive from dp × pp × tp
  std::string coordinator = "127.0.0.1:29500";  ///< host:port where rank 0 listens
  std::string token;       ///< shared secret every rank presents; empty = token_file or $TROUPE_TOKEN
  std::string token_file;  ///< a file whose first line is the token
  double bootstrap_timeout_s = 60;    ///< how long rank 0 waits for all ranks
  double peer_timeout_s = 10;         ///< silence after which a peer counts as lost
  double collective_timeout_s = 120;  ///< bound on any one collective
  Topology topology = Topology::automatic;  ///< all-reduce: "auto", "flat" or "two_level"
  std::string host_id;                ///< this machine's identity; empty = host name + boot id
  DeviceKind device = DeviceKind::cpu;  ///< "cpu" or "cuda" (one GPU per rank, by local rank)
  /// "cuda" with more ranks on a host than GPUs: ranks share the GPUs (local rank modulo
  /// their count), every rank's collectives staged through host memory over UCX, since
  /// NCCL will not put two ranks on one device.
  bool share_gpus = false;
  /// Resolved from token, token_file or $TROUPE_TOKEN (runtime/config/token.hpp); not a
  /// key, never printed. Empty: the job has none (allowed on a loopback coordinator only).
  std::string secret;
};

/// [parallel]: the shape of the job: data-parallel replicas of a pipeline of pp stages.
struct ParallelConfig {
  int64_t dp = 0;  ///< 0 = derive from world_size / (pp × tp)
  int64_t pp = 1;  ///< pipeline stages
  int64_t tp = 1;  ///< tensor-parallel ranks per layer (Megatron's), the innermost axis
  /// The rank order, fastest-varying axis first: "pp,dp" puts a pipeline's stages on
  /// consecutive ranks, "dp,pp" a stage's replicas (pipeline/topology.hpp).
  pipeline::GridOrder order = pipeline::GridOrder::pp_fastest;
  /// With tp > 1: LayerNorm and the residual stream sharded along the sequence, the
  /// tensor-parallel all-reduces replaced by reduce-scatter and all-gather (Megatron's).
  bool sequence_parallel = false;
};

/// [pipeline] partition: a method, or the layer count of each stage.
struct PipelinePartition {
  /// "flops", "uniform", "parameters" or "profile"; not used when counts are given.
  PartitionMethod method = PartitionMethod::flops;
  std::vector<int64_t> counts;  ///< explicit layer counts by stage
};

/// [pipeline]: how the layers are cut into stages and the order each stage runs its
/// micro-batches in (the micro-batches are [batch] gradient_accumulation_steps).
struct PipelineConfig {
  std::string schedule = "1f1b";  ///< a built-in's name (pipeline/schedule.hpp) or a registered one
  /// A schedule table (pipeline/table.hpp) instead of `schedule`: one CSV row per stage.
  std::string schedule_file;
  /// Model chunks per rank; 0 = the schedule's own (2 for interleaved_1f1b and zbv, else 1).
  int64_t virtual_stages = 0;
  PipelinePartition partition;
};

/// [zero]: ZeRO partitioning (DeepSpeed's zero_optimization meanings; sizes in elements).
struct ZeroConfig {
  /// 0 = plain data parallel; 1 optimizer state, 2 + gradients, 3 + parameters
  int64_t stage = 0;
  /// gradient elements reduced together (25 MiB of fp32, DDP's bucket)
  int64_t reduce_bucket_size = 6553600;
  /// stages 2-3: a second bucket fills while the previous one reduces
  bool overlap_comm = true;
  /// stage 3: elements gathered ahead of use
  int64_t prefetch_bucket_size = 50000000;
  /// stage 3: cap on gathered elements that prefetch may reach
  int64_t max_live_parameters = 1000000000;
  /// stage 3: keep a layer gathered if it is used again within this many elements
  int64_t max_reuse_distance = 1000000000;
  /// stage 3: parameters this small stay gathered
  int64_t param_persistence_threshold = 100000;
  /// What the stage partitions, for every decision that follows from it (a resolved
  /// config's stage is valid).
  ZeroPolicy policy() const { return ZeroPolicy::of(stage); }
};

/// [offload]: ZeRO-Offload / ZeRO-Infinity memory tiers, managed per rank by the
/// offload manager actor.
struct OffloadConfig {
  /// Where the optimizer state lives, at any stage: "none" (in memory beside the
  /// partition), "cpu" (host memory; on a CPU rank the same as "none"; troupe's fused
  /// kernels update both) or "nvme" (files under nvme_path, swapped through host buffers
  /// while the step runs). A GPU rank's "cpu" moves it off the device (ZeRO-Offload).
  OffloadTier optimizer = OffloadTier::none;
  /// Stage 3: where the parameter partition lives: "none", "cpu" (the same on a CPU rank)
  /// or "nvme".
  OffloadTier param = OffloadTier::none;
  /// Directory of the nvme tier; each rank makes a folder of its own in it.
  std::string nvme_path;
  /// Host memory the offload manager may hold (state and swap buffers); 0 = no limit.
  int64_t host_budget_bytes = 0;
  /// Elements of the partition updated (and swapped) together.
  int64_t sub_group_size = 100000000;
  /// Swap buffers in flight (reading ahead, updating, writing back): at least 2.
  int64_t buffer_count = 4;
  /// Bytes per I/O request: a positive multiple of 4096 (DeepSpeed's aio block_size).
  int64_t block_size = 1048576;
  /// I/O requests in flight per file operation (DeepSpeed's aio queue_depth).
  int64_t queue_depth = 8;
  /// "prefer": O_DIRECT where the file system allows it, else buffered, said once;
  /// "require": O_DIRECT or the rank stops; "off": buffered through the page cache.
  DirectIo direct_io = DirectIo::prefer;
};

/// [batch]: DeepSpeed's rule global = micro × accumulation × dp; 0 = derive.
struct BatchConfig {
  int64_t micro_batch_size = 0;
  /// micro_batch_size = "auto": the largest that divides a replica's share of the global
  /// batch and fits memory_budget_bytes, chosen when the job is loaded (estimate.hpp).
  bool micro_batch_auto = false;
  /// "auto" only: what one rank may hold; 0 = this machine's memory over the job's ranks.
  int64_t memory_budget_bytes = 0;
  int64_t gradient_accumulation_steps = 0;
  int64_t global_batch_size = 0;
};

/// [optimizer]: the optimizer and its hyper-parameters.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::adamw;
  double lr = 1e-3;
  double beta1 = 0.9;  ///< TOML: betas = [beta1, beta2]
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;      ///< adamw: decoupled; adam: L2; sgd: L2
  double momentum = 0.0;           ///< sgd only
  bool nesterov = false;           ///< sgd only
  double gradient_clipping = 0.0;  ///< global L2 norm clip (DeepSpeed's semantics); 0 = off
};

/// [scheduler]: a learning-rate schedule, DeepSpeed's (optim/lr_schedule.hpp), with the keys
/// of its "params" in the section itself. A rate or size left at -1 is unset (DeepSpeed's
/// None): warmup_max_lr then means the optimizer's lr (WarmupLR) or 0.001 (WarmupDecayLR),
/// the second step size and stair count the first's.
struct SchedulerConfig {
  /// "" = the optimizer's constant lr; WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle
  LrScheduleType type = LrScheduleType::constant;
  double warmup_min_lr = 0;
  double warmup_max_lr = -1;
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;  ///< "log" or "linear"
  int64_t total_num_steps = -1;
  double warmup_min_ratio = 0;
  double cos_min_ratio = 1e-4;
  double cycle_min_lr = -1;
  double cycle_max_lr = -1;
  double decay_lr_rate = 0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = -1;
  int64_t cycle_first_stair_count = 0;
  int64_t cycle_second_stair_count = -1;
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0;
};

/// [precision]: what the model computes in. "bf16" and "fp16" keep fp32 master parameters
/// and optimizer state in the shard owners (DeepSpeed's mixed precision); the gradients are
/// reduced in communication_data_type.
struct PrecisionConfig {
  Dtype dtype = Dtype::fp32;
  std::optional<Dtype> communication_data_type;  ///< unset ("") = dtype (DeepSpeed's default)
  /// The loss scaler (optim/loss_scaler.hpp) with DeepSpeed's fp16 keys: always on for fp16,
  /// on request for the others (whose range needs none; it still skips overflowing steps).
  bool loss_scaling = false;
  double loss_scale = 0;  ///< 0: dynamic
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;

  bool scales_loss() const { return loss_scaling || dtype == Dtype::fp16; }
  /// The type gradients are reduced in.
  Dtype reduce_dtype() const { return communication_data_type.value_or(dtype); }
};

/// [model]: the built-in model's family and shape.
struct ModelConfig {
  /// "gpt" (GPT-2: LayerNorm, learned positions, GELU MLP, biases) or "llama" (RMSNorm,
  /// rotary embeddings, SwiGLU, grouped-query attention, no biases).
  std::string type = "gpt";
  int64_t vocab_size = 256;  ///< byte-level tokens need 256
  int64_t seq_len = 64;
  int64_t d_model = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;  ///< llama: key/value heads, dividing n_heads; 0 = n_heads
  /// 0 = the family's default: 4 × d_model for gpt; for llama 8/3 × d_model rounded up to
  /// a multiple of 256 (Meta's rule)
  int64_t d_ff = 0;
  double rope_theta = 10000.0;  ///< llama: the rotary embedding's base θ
  double norm_eps = 1e-5;       ///< the LayerNorms' or RMSNorms' ε
  /// gpt: the MLP's "gelu" (erf) or "gelu_tanh" (GPT-2's gelu_new); llama gates with silu
  std::string activation = "gelu";
  bool tie_embeddings = false;  ///< the output head reuses the token embedding's weight
  /// Forward keeps only each stage's input; backward runs the stage's forward again
  /// (with a trainer's layers too). Trades compute for the activations held.
  bool activation_checkpointing = false;
  /// A file of parameters the model starts from (`troupe export`'s, or PyTorch's
  /// torch.save of a dict of name → tensor); empty = the seed's initialisation.
  std::string init_from;
};

/// [data]: where tokens come from.
struct DataConfig {
  std::string path;                    ///< text file of bytes; empty = synthetic corpus
  int64_t synthetic_bytes = 1 << 20;   ///< size of the synthetic corpus
  int64_t prefetch_micro_batches = 2;  ///< how far the data loader runs ahead
  /// megatron-core indexed datasets (PREFIX of PREFIX.bin / PREFIX.idx) blended by `weights`
  /// (empty = by size); empty = `path`'s bytes.
  std::vector<std::string> paths;
  std::vector<double> weights;
  /// Train, validation and test shares (megatron's "969,30,1"); empty = 969, 30, 1 for
  /// `paths`, and all of `path`'s bytes for training.
  std::vector<double> split;
};

/// [train]: the loop.
struct TrainConfig {
  int64_t steps = 20;
  int64_t seed = 1234;
  int64_t log_interval = 1;  ///< progress line every N steps
  int64_t threads = 0;       ///< compute threads per rank; 0 = cores / local ranks
  std::string metrics_path;  ///< JSON lines, one per step; empty = none
  /// `troupe run`: when a rank dies, start every rank again (from the last complete
  /// checkpoint under [checkpoint] dir, or from the start) up to this many times.
  int64_t max_restarts = 0;
  /// Every eval_interval steps (0 = never), `eval_steps` global batches of the validation
  /// split run forward only, every rank taking part; their mean loss is val_loss.
  int64_t eval_interval = 0;
  int64_t eval_steps = 10;
};

/// [trace]: the Perfetto / Chrome-trace timeline.
struct TraceConfig {
  std::string path;  ///< merged trace file; empty = no tracing
};

/// [checkpoint]: saving the training state every N steps into `dir` and resuming from it.
struct CheckpointConfig {
  std::string dir;          ///< ROOT of step-NNNNNNNN folders; empty = no checkpoints
  int64_t every_steps = 0;  ///< save after every N steps; 0 = never (resume only)
  int64_t keep_last = 2;    ///< complete checkpoints kept (at least one always)
  bool async = true;        ///< write while training goes on; false: the step waits for the save
  /// Continue from this checkpoint folder, or "latest" (the newest complete one under dir,
  /// none: start afresh); empty = start afresh.
  std::string resume;
};

/// [monitor]: rank 0's writers of the per-step metrics for the tools people watch training
/// with (runtime/monitor/training_monitor.hpp). Writing never slows or stops training.
struct MonitorConfig {
  std::string tensorboard;  ///< folder of TensorBoard event files; empty = none
  std::string csv;          ///< folder of DeepSpeed csv_monitor's files (one per metric); empty = none
  int64_t queue = 1024;     ///< records held while the disk is behind; more are dropped (said once)
};

/// The whole job.
struct JobConfig {
  std::string source = "<struct>";  ///< file name the config came from, for messages
  /// Where each key was read (kept so checks made later, against the model, still name
  /// the line); empty for a config built in code.
  ConfigOrigins origins;
  /// What loading noticed and went on with (a DeepSpeed key ignored); the front prints them.
  std::vector<std::string> warnings;
  ClusterConfig cluster;
  ParallelConfig parallel;
  PipelineConfig pipeline;
  ZeroConfig zero;
  OffloadConfig offload;
  BatchConfig batch;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  PrecisionConfig precision;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  CheckpointConfig checkpoint;
  TraceConfig trace;
  MonitorConfig monitor;
};

}  // namespace troupe
