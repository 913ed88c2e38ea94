// Engine: one rank's runtime — transport, actor system and actors — behind the
// embedding API of include/troupe/troupe.hpp.
#include <torch/torch.h>
#include <caf/all.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <functional>
#include <numeric>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <ATen/CPUGeneratorImpl.h>

#include "actors/checkpoint_writer.hpp"
#include "actors/comm_agent.hpp"
#include "actors/data_loader.hpp"
#include "actors/issuing_stream.hpp"
#include "actors/model_parameters.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/pipeline.hpp"
#include "actors/protocol/scheduler.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/scheduler.hpp"
#include "actors/stage.hpp"
#include "actors/stream.hpp"
#include "kernels/devices.hpp"
#include "memory/nvme_store.hpp"
#include "pipeline/schedule.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/config/scheduler.hpp"
#include "runtime/config/token.hpp"
#include "runtime/coordinator.hpp"
#include "runtime/devices.hpp"
#include "runtime/flops_profile.hpp"
#include "runtime/gpu_rank.hpp"
#include "runtime/model/optimizer.hpp"
#include "runtime/model/tensor_parallel.hpp"
#include "runtime/monitor/training_monitor.hpp"
#include "runtime/overflow_injection.hpp"
#include "runtime/parameter_file.hpp"
#include "runtime/pipeline_plan.hpp"
#include "runtime/stand_in_device.hpp"
#include "runtime/tensor_parallel_comm.hpp"
#include "runtime/trace_merge.hpp"
#include "troupe/troupe.hpp"

namespace troupe {
namespace {

// Which rank this process is: given, from a launcher's environment, or alone.
Result<RankEnvironment> find_rank(const JobConfig& config, std::optional<RankEnvironment> given) {
  if (!given) {
    auto detected = detect_rank_environment(process_environment());
    if (!detected) return detected.error();
    given = *detected;
  }
  if (!given) {
    if (config.cluster.world_size != 1)
      return make_error(
          fmt::format("{}: [cluster] world_size is {} but this process was given no rank; start the "
                      "ranks with `troupe run`, `troupe launch` or another launcher, or set "
                      "TROUPE_RANK and TROUPE_WORLD_SIZE",
                      config.source, config.cluster.world_size));
    return RankEnvironment{0, 1, 0, 1, "", "single process", ""};
  }
  if (given->world_size != config.cluster.world_size)
    return make_error(fmt::format("{} says the world has {} ranks but {} sets [cluster] world_size = {}",
                                  given->source, given->world_size, config.source,
                                  config.cluster.world_size));
  return *given;
}

Result<TransportOptions> transport_options(const JobConfig& config, const RankEnvironment& rank) {
  const std::string& text = rank.coordinator.empty() ? config.cluster.coordinator : rank.coordinator;
  const std::string source = rank.coordinator.empty()
                                 ? "[cluster] coordinator"
                                 : (rank.coordinator_source.empty() ? rank.source : rank.coordinator_source);
  auto address = parse_host_port(text, source);
  if (!address) return address.error();
  TransportOptions o;
  o.rank = rank.rank;
  o.world_size = rank.world_size;
  o.coordinator_host = address->host;
  o.coordinator_port = address->port;
  o.coordinator_source = source;
  auto token = rank_token(config.cluster, address->host);
  if (!token) return token.error();
  o.token = std::move(token).value();
  o.bootstrap_timeout_s = config.cluster.bootstrap_timeout_s;
  o.peer_timeout_s = config.cluster.peer_timeout_s;
  o.collective_timeout_s = config.cluster.collective_timeout_s;
  o.host_id = config.cluster.host_id;
  o.topology = config.cluster.topology;
  o.poll_before_sleep_us = ranks_fit_cores(rank.local_world_size) ? o.poll_before_sleep_us : 0;
  return o;
}

int64_t threads_per_rank(const JobConfig& config, const RankEnvironment& rank) {
  if (config.train.threads > 0) return config.train.threads;
  int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, rank.local_world_size));
}

ZeroOptions zero_options(const JobConfig& config) {
  const ZeroConfig& z = config.zero;
  ZeroOptions o;
  o.policy = z.policy();
  o.reduce_bucket_size = z.reduce_bucket_size;
  o.overlap_comm = z.overlap_comm;
  o.limits.prefetch_bucket_size = static_cast<std::size_t>(z.prefetch_bucket_size);
  o.limits.max_live_parameters = static_cast<std::size_t>(z.max_live_parameters);
  o.limits.max_reuse_distance = static_cast<std::size_t>(z.max_reuse_distance);
  o.persistence_threshold = z.param_persistence_threshold;
  o.gradient_clipping = config.optimizer.gradient_clipping;
  return o;
}

// The element type of the compute and of the reduction, for the stage and the kernels.
DataType data_type_of(Dtype dtype) {
  switch (dtype) {
    case Dtype::bf16:
      return DataType::bf16;
    case Dtype::fp16:
      return DataType::f16;
    case Dtype::fp32:
      break;
  }
  return DataType::f32;
}

std::optional<OffloadOptions> offload_options(const JobConfig& config, int64_t rank) {
  const OffloadConfig& c = config.offload;
  if (c.optimizer == OffloadTier::none) return std::nullopt;
  OffloadOptions o;
  o.state_on_nvme = c.optimizer == OffloadTier::nvme;
  o.parameters_on_nvme = c.param == OffloadTier::nvme;
  o.nvme_dir = c.nvme_path.empty() ? "" : fmt::format("{}/rank{}", c.nvme_path, rank);
  o.host_budget_bytes = c.host_budget_bytes;
  o.sub_group_size = c.sub_group_size;
  o.buffer_count = c.buffer_count;
  o.block_size = c.block_size;
  o.queue_depth = c.queue_depth;
  o.direct_io = c.direct_io;
  return o;
}

OptimizerRule optimizer_rule(const OptimizerConfig& c) {
  OptimizerRule r;
  r.kind = c.type == OptimizerType::adamw  ? OptimizerRule::Kind::adamw
           : c.type == OptimizerType::adam ? OptimizerRule::Kind::adam
                                           : OptimizerRule::Kind::sgd;
  r.lr = c.lr;
  r.beta1 = c.beta1;
  r.beta2 = c.beta2;
  r.eps = c.eps;
  r.weight_decay = c.weight_decay;
  r.momentum = c.momentum;
  r.nesterov = c.nesterov;
  return r;
}

// The nvme tier's folder must be usable before any step: checked when the engine starts,
// so a bad nvme_path stops the job at once with the path and the reason. nvme_path is made
// here when missing (its parent must exist, as troupe check says); each rank's store makes
// its own folder in it. When its I/O will be buffered, the first rank of each host says so
// once: figures of such a run are the page cache's, not the device's.
Status check_nvme_tier(const OffloadConfig& config, const std::optional<OffloadOptions>& offload,
                       const RankEnvironment& rank) {
  if (!offload || (!offload->state_on_nvme && !offload->parameters_on_nvme)) return {};
  if (auto made = make_directory(config.nvme_path); !made)
    return make_error("[offload] nvme_path: " + made.error().message);
  auto probe = open_nvme_store(*offload, 1);
  if (!probe) return probe.error();
  if (!(*probe)->direct() && rank.local_rank == 0)
    std::fprintf(stderr, "troupe: the nvme tier uses buffered I/O, not direct: %s\n",
                 (*probe)->buffered_reason().c_str());
  return {};
}

// [cluster] device = "cuda": this rank's GPU must exist before anything starts.
Status usable_gpu(const RankEnvironment& rank, bool share) {
  if (auto usable = check_cuda_devices(rank.local_rank, rank.local_world_size, share); !usable)
    return make_error(fmt::format("rank {}: {}", rank.rank, usable.error().message));
  return {};
}

// Every rank starts from rank 0's parameters (each tensor once), whatever its own
// initialisation did.
Status broadcast_parameters(Transport& transport, std::vector<torch::Tensor> parameters,
                            CommunicatorId comm = world_communicator) {
  torch::NoGradGuard no_grad;
  if (parameters.empty() || transport.world_size() == 1) return {};
  torch::Tensor flat = torch::cat([&] {
                         std::vector<torch::Tensor> views;
                         for (auto& p : parameters)
                           views.push_back(p.detach().reshape({-1}).to(torch::kFloat32));
                         return views;
                       }())
                           .contiguous();
  TROUPE_TRY(transport.broadcast_sync(flat.data_ptr<float>(), static_cast<std::size_t>(flat.numel()),
                                      DataType::f32, 0, comm));
  int64_t offset = 0;
  for (auto& p : parameters) {
    p.copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  return {};
}

// [parallel] tp > 1: the trainer's model is made of tensor-parallel layers over a group
// of this rank's size and position; what does not work with tensor parallelism yet is
// refused naming the key.
// Whether the pipeline's cut comes from timing the layers on this machine.
bool profiles_layers(const JobConfig& config) {
  return config.parallel.pp > 1 && config.pipeline.partition.counts.empty() &&
         config.pipeline.partition.method == PartitionMethod::profile;
}

Status check_tensor_parallel(const JobConfig& config, const RankEnvironment& rank, const Trainable& t) {
  const int64_t tp = config.parallel.tp;
  const auto& group = t.tensor_parallel;
  if (!group)
    return make_error(fmt::format(
        "rank {}: {} sets [parallel] tp = {} but the model was given no tensor-parallel group: build it from "
        "troupe's tensor-parallel layers over Engine::tensor_parallel_group() and pass that group in "
        "Trainable::tensor_parallel",
        rank.rank, config.source, tp));
  if (group->size() != tp || group->index() != rank.rank % tp)
    return make_error(
        fmt::format("rank {}: the model's tensor-parallel group is position {} of {}, but [parallel] "
                    "tp = {} puts this rank at position {}",
                    rank.rank, group->index(), group->size(), tp, rank.rank % tp));
  if (group->sequence_parallel() != config.parallel.sequence_parallel)
    return make_error(
        fmt::format("rank {}: the model's tensor-parallel group and [parallel] sequence_parallel "
                    "disagree",
                    rank.rank));
  const std::pair<bool, const char*> not_yet[] = {
      {config.parallel.pp > 1 && pipeline::event_scheduler(config.pipeline.schedule) != nullptr,
       "an event-driven [pipeline] schedule (its ranks may order their work differently)"},
      {!config.model.init_from.empty() && !t.starts_from_init,
       "[model] init_from into a trainer's own model (cut its shards from the loaded whole model and set "
       "Trainable::starts_from_init)"}};
  for (const auto& [used, what] : not_yet)
    if (used)
      return make_error(
          fmt::format("{}: [parallel] tp = {} does not combine with {} yet: set tp = 1 or drop it",
                      config.source, tp, what));
  return {};
}

// Every rank holding shard t of the model, in rank order: each shard's ranks start from
// the first one's values (rank t), as the world does from rank 0 without tensor parallelism.
Result<CommunicatorId> make_shard_slices(Transport& transport, int64_t tp, int64_t rank) {
  CommunicatorId mine = world_communicator;
  for (int64_t t = 0; t < tp; ++t) {
    std::vector<int64_t> members;
    for (int64_t r = t; r < transport.world_size(); r += tp) members.push_back(r);
    auto made = transport.make_communicator(members);
    if (!made) return made.error();
    if (rank % tp == t) mine = *made;
  }
  return mine;
}

// A validation batch's actions: the step's loads, forwards and activation transfers in the
// step's order. Dropping backwards and updates from a schedule that cannot deadlock leaves
// one that cannot either: each forward still follows the forwards it takes input from.
pipeline::Program forward_program(const pipeline::Program& step) {
  pipeline::Program forward;
  for (const pipeline::Action& a : step) {
    using pipeline::Op;
    if (a.op == Op::load || a.op == Op::forward || a.op == Op::send_activation || a.op == Op::recv_activation)
      forward.push_back(a);
  }
  return forward;
}

}  // namespace

Result<std::shared_ptr<TensorParallelGroup>> Engine::tensor_parallel_group(
    const JobConfig& config, std::optional<RankEnvironment> rank) {
  auto resolved = resolve_config(config);
  if (!resolved) return resolved.error();
  if (resolved->parallel.tp == 1) return std::shared_ptr<TensorParallelGroup>();
  auto found = find_rank(*resolved, std::move(rank));
  if (!found) return found.error();
  const int64_t tp = resolved->parallel.tp;
  return std::make_shared<TensorParallelGroup>(tp, found->rank % tp, resolved->parallel.sequence_parallel);
}

class Engine::Impl {
 public:
  JobConfig config;
  RankEnvironment rank;
  torch::nn::Sequential layers;
  std::unique_ptr<Tracer> tracer;
  std::shared_ptr<const std::atomic<uint64_t>> sent;  // the transport's payload bytes sent
  std::shared_ptr<MemoryLedger> ledger = std::make_shared<MemoryLedger>();
  std::shared_ptr<const LrSchedule> lr_schedule;  // [scheduler]; unset: a constant rate
  // A GPU, or CPU streams standing in for one; before the actor system: its streams
  // outlive the actors. Null: the host path.
  std::unique_ptr<RankDevice> device;
  caf::actor_system_config actor_config;
  std::unique_ptr<caf::actor_system> system;
  caf::actor comm, loader, scheduler;  // scheduler: the scheduler actor (actors/scheduler.hpp)
  std::vector<caf::actor> stages;   // by chunk: one, or v with virtual stages
  std::shared_ptr<Stream> shared_compute;  // the chunks' compute stream, when they share one
  PipelinePlan plan;
  std::vector<CommunicatorId> groups = {world_communicator};  // by chunk: its data-parallel group
  std::vector<TiedWeight> ties;               // what this rank's stage shares with others
  std::shared_ptr<TensorParallelGroup> tensor_group;  // tp > 1: the model's layers' group
  CommunicatorId tensor_comm = world_communicator;    // tp > 1: this rank's group
  // tp > 1 with chunks computing on streams of their own: chunk c's group communicator (c ≥ 1)
  std::vector<CommunicatorId> chunk_tensor_comms;
  std::vector<std::shared_ptr<TensorParallelComm>> chunk_tensor_collectives;
  CommunicatorId norm_comm = world_communicator;      // tp > 1: where the squared norm is summed
  caf::actor collectives;  // a GPU rank's (NCCL or staged)
  std::vector<std::string> tensor_names;  // the whole model's parameters, by tensor
  std::vector<ModelTensor> model_tensors;  // their names and shapes, for the manifest
  std::vector<TensorSplit> tensor_splits;  // tp > 1: how each is split across the group
  RankCheckpoint checkpoint;              // this rank's part of a checkpoint, with [checkpoint]
  caf::actor checkpoint_writer;           // with [checkpoint] every_steps
  int64_t last_save = -1;                 // the step of the save last handed to the writer
  int64_t compute_threads = 1;
  int64_t steps_done = 0;
  data_position data_at{};         // where the training samples stand
  bool validates = false;          // the trainable has validation samples (evaluate() runs)
  bool failed = false;
  bool finished = false;
  Status finish_outcome;  // what the first finish() returned, which a second one returns again
  double step_flops = 0;                     // Trainable::step_flops
  double gemm_peak = 0;                      // rank 0, with step_flops: MFU's denominator, measured here
  std::unique_ptr<TrainingMonitor> monitor;  // rank 0 with [monitor] folders
  // The last step's record and when the step ended, held until a validation pass after it
  // can join it.
  struct HeldStep {
    StepMetrics metrics;
    std::chrono::system_clock::time_point ended;
  };
  std::optional<HeldStep> unrecorded;

  // Engine::finish's work: saves durable, traces written, the scheduler's end, the monitor drained.
  Status finish_rank();

  void record_held_step() {
    if (monitor && unrecorded) monitor->record(unrecorded->metrics, unrecorded->ended);
    unrecorded.reset();
  }

  ~Impl() {
    // The chunks' shared stream drained here, on this thread, so that no chunk's state
    // waits for it on an actor thread as it goes (see StageState's destructor).
    if (shared_compute)
      shared_compute->record().wait_for(
          std::chrono::milliseconds(static_cast<int64_t>(1000 * config.cluster.collective_timeout_s)));
    // Exited and let go: the system's end waits for its detached actors (the device
    // collectives) to be destroyed, which a handle kept here would prevent.
    for (auto* a : {&checkpoint_writer, &scheduler, &loader, &collectives, &comm})
      if (*a) caf::anon_send_exit(std::exchange(*a, caf::actor{}), caf::exit_reason::user_shutdown);
    for (auto& chunk : stages)
      if (chunk) caf::anon_send_exit(std::exchange(chunk, caf::actor{}), caf::exit_reason::user_shutdown);
    system.reset();  // waits for the actors; the comm agent closes the transport
  }

  double step_timeout_s() const { return 2 * config.cluster.collective_timeout_s + 60; }

  // [cluster] device = "cuda": the rank's GPU, NCCL, and the model moved onto the GPU.
  Status open_gpu(Transport& transport) {
    const Result<int> devices = kernels::cuda_device_count();
    const int count = devices.ok() ? *devices : 0;
    // NCCL groups for what the device collectives name besides the world: each chunk's
    // data-parallel group and each tied weight's stages.
    std::vector<CommunicatorId> named(groups.begin(), groups.end());
    for (const TiedWeight& t : ties) named.push_back(t.comm);
    auto opened =
        GpuRank::open(transport, gpu_of(rank.local_rank, count), config.cluster.collective_timeout_s,
                      tracer.get(), config.cluster.share_gpus, std::move(named));
    if (!opened) return make_error(fmt::format("rank {}: {}", rank.rank, opened.error().message));
    device = std::move(*opened);
    if (auto moved = device->adopt(layers); !moved)
      return make_error(fmt::format("rank {}: {}", rank.rank, moved.error().message));
    return {};
  }

  // One stage actor per model chunk this rank holds (virtual stages: v of them), each with
  // its layers, its place among the virtual stages, its data-parallel communicator and,
  // on the nvme tier, a folder of its own; then each learns which neighbours share its rank.
  void spawn_chunks(const StageOptions& common) {
    const pipeline::RankPlace& place = plan.place;
    const int64_t chunks = plan.layout.chunks, virtual_stages = plan.layout.virtual_stages();
    auto world_rank_of = [&](int64_t vs) {
      return vs < 0 || vs >= virtual_stages
                 ? int64_t{-1}
                 : plan.grid.rank_of(plan.layout.rank_of(vs), place.replica, place.shard);
    };
    // The chunks share one compute stream, as on one device, so a rank computes one thing
    // at a time, which is what its schedule plans for. Not under ZeRO stages 2-3: there a
    // work item waits on the stream for its own chunk's collectives (a free gradient bucket,
    // a gathered row), and with one stream a chunk waiting for its peers could hold up the
    // other chunk's work they wait for in turn; each chunk computes on a stream of its own.
    // On the device path the shared stream issues onto the device's compute stream.
    StageOptions shared = common;
    auto failures = std::make_shared<std::vector<caf::actor>>();  // where the shared stream's errors go
    auto on_error = [failures](const std::string& what) {
      for (const caf::actor& chunk : *failures) caf::anon_send(chunk, stage_failed{what});
    };
    if (chunks > 1 && !config.zero.policy().compute_waits_for_collectives())
      shared.compute =
          common.device ? std::shared_ptr<Stream>(IssuingStream::make(
                              "compute", common.device->stream, common.device->scope, tracer.get(), on_error))
                        : std::shared_ptr<Stream>(CpuStream::make("compute", tracer.get(), on_error));
    for (int64_t c = 0; c < chunks; ++c) {
      StageOptions so = shared;
      const int64_t vs = plan.virtual_stage(c);
      so.model =
          stage_layers(layers, plan.first_layer_of(vs), plan.layer_counts[static_cast<std::size_t>(vs)]);
      so.tensor_parallel = TensorParallelPlace{config.parallel.tp, plan.place.shard,
                                               replicated_parameters(so.model), norm_comm};
      so.place = StagePlace{vs,
                            virtual_stages,
                            world_rank_of(vs - 1),
                            world_rank_of(vs + 1),
                            rank.rank,
                            rank.world_size,
                            groups[static_cast<std::size_t>(c)]};
      if (c > 0 && !chunk_tensor_collectives.empty())
        so.on_compute_thread = [group = tensor_group,
                                comm = chunk_tensor_collectives[static_cast<std::size_t>(c - 1)]] {
          group->use_on_this_thread(comm);
        };
      if (chunks > 1 && so.offload && !so.offload->nvme_dir.empty())
        so.offload->nvme_dir += fmt::format("/chunk{}", c);
      stages.push_back(spawn_stage(*system, std::move(so)));
    }
    *failures = stages;
    shared_compute = shared.compute;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t vs = plan.virtual_stage(c);
      auto local = [&](int64_t neighbour) -> caf::actor {
        if (neighbour < 0 || neighbour >= virtual_stages || plan.layout.rank_of(neighbour) != place.stage)
          return {};
        return stages[static_cast<std::size_t>(plan.layout.chunk_of(neighbour))];
      };
      caf::anon_send(stages[static_cast<std::size_t>(c)], local_neighbours{local(vs - 1), local(vs + 1)});
    }
  }

  void start_actors(std::shared_ptr<Transport> transport, Trainable& t) {
    actor_config.set("scheduler.policy", caf::atom("sharing"));  // no spinning workers next to compute
    actor_config.set("scheduler.max-threads", 2);
    system = std::make_unique<caf::actor_system>(actor_config);
    Tracer* tr = tracer.get();
    CommunicatorPlaces places = communicator_places(transport);
    comm = spawn_comm_agent(*system, std::move(transport), tr);
    const auto& b = config.batch;
    const pipeline::RankPlace& place = plan.place;
    validates = static_cast<bool>(t.validation);
    loader = spawn_data_loader(
        *system, DataLoaderOptions{std::move(t.data), b.micro_batch_size, b.gradient_accumulation_steps,
                                   config.parallel.dp, place.replica, config.data.prefetch_micro_batches, tr,
                                   std::move(t.validation)});
    const bool own_optimizer = static_cast<bool>(t.make_optimizer);
    OptimizerFactory optimizer = t.make_optimizer;
    if (!optimizer)
      optimizer = [o = config.optimizer](std::vector<torch::Tensor> p) {
        return make_optimizer(o, std::move(p));
      };
    StageOptions so;
    so.loss = std::move(t.loss);
    so.make_optimizer = std::move(optimizer);
    so.schedule = std::move(t.schedule);
    so.activation_checkpointing = config.model.activation_checkpointing;
    so.split_backward = pipeline::splits_backward(plan.program);
    so.ties = ties;
    so.zero = zero_options(config);
    so.dp = config.parallel.dp;
    so.rank = place.replica;
    so.compute_threads = compute_threads;
    so.collective_timeout_s = config.cluster.collective_timeout_s;
    so.comm_agent = comm;
    so.tracer = tr;
    so.ledger = ledger;
    so.offload = offload_options(config, rank.rank);
    // The [optimizer] of the config runs as troupe's fused kernels (one pass per element,
    // bit-identical to LibTorch's on AVX CPUs, about 10× faster) with its state in memory:
    // the offload manager's "cpu" tier. A trainer's own optimizer factory runs as given.
    so.rule = optimizer_rule(config.optimizer);
    so.lr_schedule = lr_schedule;
    so.dtype = data_type_of(config.precision.dtype);
    if (config.precision.communication_data_type)
      so.reduce_type = data_type_of(*config.precision.communication_data_type);
    if (config.precision.scales_loss()) so.loss_scale = loss_scale_options(config);
    so.inject_overflow_steps = injected_overflow_steps(rank.rank);
    if (device) {
      // A GPU rank: Adam and AdamW as the fused CUDA kernel (no factory), SGD as LibTorch's
      // on the device; with [offload] optimizer, the tier's kernels on the host.
      so.device = device->spawn(*system, comm, ledger, std::move(places));
      collectives = so.device->collectives;
      if (!so.offload && !own_optimizer && so.rule.kind != OptimizerRule::Kind::sgd)
        so.make_optimizer = nullptr;
    } else if (!so.offload && !own_optimizer) {
      so.offload = OffloadOptions{};
    }
    spawn_chunks(std::move(so));
    if (device) device->report_errors_to(stages.front());
    SchedulerOptions sched;
    sched.chunks = stages;
    sched.data_loader = loader;
    sched.comm_agent = comm;
    sched.program = plan.program;
    if (validates) sched.eval_program = forward_program(plan.program);
    sched.micro_count = b.gradient_accumulation_steps;
    sched.stages = config.parallel.pp;
    sched.world_rank = rank.rank;
    sched.world_size = rank.world_size;
    sched.window = 4 * config.parallel.pp + 4;  // room for every receive a stage posts ahead
    sched.fetch_timeout_s = config.cluster.collective_timeout_s;
    sched.tracer = tr;
    use_event_scheduler(sched);
    scheduler = spawn_scheduler(*system, std::move(sched));
  }

  // [pipeline] schedule names an event-driven scheduler (pipeline/events.hpp): this rank's
  // decides each compute action as the step goes; plan.program, its plan at unit costs,
  // still says which loads the rank has and whether backwards split.
  void use_event_scheduler(SchedulerOptions& sched) {
    if (config.parallel.pp == 1 || !config.pipeline.schedule_file.empty()) return;
    pipeline::EventSchedulerFactory make = pipeline::event_scheduler(config.pipeline.schedule);
    if (!make) return;
    const pipeline::ScheduleShape shape{config.parallel.pp, config.batch.gradient_accumulation_steps,
                                        plan.layout.chunks};
    sched.policy = make(shape, plan.place.stage);
    sched.policy_name = config.pipeline.schedule;
    sched.layout = plan.layout;
    sched.stage = plan.place.stage;
    sched.split_backward = pipeline::splits_backward(plan.program);
    sched.ledger = ledger;
  }

  // This rank's stage, its layers and program, and (pp > 1) every stage's data-parallel
  // communicator, made in stage order on every rank, then one communicator per tied
  // weight and replica over the stages that use it.
  Status plan_stages(Transport& transport, Trainable& t) {
    std::vector<double> costs;
    const bool by_method = config.parallel.pp > 1 && config.pipeline.partition.counts.empty();
    if (profiles_layers(config)) TROUPE_TRY(profile(transport, t, costs));
    if (by_method && config.pipeline.partition.method == PartitionMethod::flops) costs = t.layer_costs;
    auto planned = plan_pipeline(config, layers, rank.rank, costs);
    if (!planned) return make_error(fmt::format("rank {}: {}", rank.rank, planned.error().message));
    plan = std::move(*planned);
    if (config.parallel.pp == 1 && config.parallel.tp == 1) return {};
    TROUPE_TRY(make_groups(transport, 0));
    if (config.parallel.tp > 1) TROUPE_TRY(make_tensor_groups(transport));
    if (config.parallel.tp > 1 && plan.layout.chunks > 1 &&
        config.zero.policy().compute_waits_for_collectives())
      for (int64_t c = 1; c < plan.layout.chunks; ++c) TROUPE_TRY(make_chunk_tensor_group(transport));
    TROUPE_TRY(tie_stages(transport));
    for (int64_t c = 1; c < plan.layout.chunks; ++c) TROUPE_TRY(make_groups(transport, c));
    return {};
  }

  // Every stage's data-parallel communicator for chunk `chunk`, made in stage order on
  // every rank; this rank's is its chunk's group. Each chunk has its own, so the
  // collectives of two chunks of a rank never interleave on one communicator.
  Status make_groups(Transport& transport, int64_t chunk) {
    groups.resize(static_cast<std::size_t>(plan.layout.chunks), world_communicator);
    for (int64_t s = 0; s < config.parallel.pp; ++s)
      for (int64_t t = 0; t < config.parallel.tp; ++t) {
        auto members = pipeline::place(plan.grid, plan.grid.rank_of(s, 0, t));
        if (!members) return members.error();
        auto made = transport.make_communicator(members->data_parallel_group);
        if (!made)
          return make_error(fmt::format("rank {}: stage {}'s data-parallel group (chunk {}, shard {}): {}",
                                        rank.rank, s, chunk, t, made.error().message));
        if (s == plan.place.stage && t == plan.place.shard) groups[static_cast<std::size_t>(chunk)] = *made;
      }
    return {};
  }

  // tp > 1: every (stage, replica)'s tensor-parallel group, then every stage's ranks (the
  // squared gradient norm of ZeRO stages 1-3 is summed over them), made in order on every
  // rank.
  Status make_tensor_groups(Transport& transport) {
    const auto& g = plan.grid;
    auto mine = make_group_communicators(transport, "the tensor-parallel group");
    if (!mine) return mine.error();
    tensor_comm = *mine;
    for (int64_t s = 0; s < g.pp; ++s) {
      std::vector<int64_t> members;
      for (int64_t r = 0; r < g.world_size(); ++r)
        if (pipeline::place(g, r)->stage == s) members.push_back(r);
      auto made = transport.make_communicator(members);
      if (!made)
        return make_error(fmt::format("rank {}: stage {}'s ranks: {}", rank.rank, s, made.error().message));
      if (s == plan.place.stage) norm_comm = *made;
    }
    if (config.zero.policy().every_rank_updates_everything())
      norm_comm = tensor_comm;  // holds every gradient
    return {};
  }

  // Under ZeRO 2-3 each chunk computes on a stream of its own, and two streams issuing one
  // group's collectives on one communicator could order them differently on the group's
  // ranks: every chunk after the first gets its group a communicator of its own.
  Status make_chunk_tensor_group(Transport& transport) {
    auto mine = make_group_communicators(transport, "a chunk's tensor-parallel group");
    if (!mine) return mine.error();
    chunk_tensor_comms.push_back(*mine);
    return {};
  }

  // One communicator per (stage, replica)'s tensor-parallel group, made in order on every
  // rank; this rank's group's is returned. `what` names the groups in errors.
  Result<CommunicatorId> make_group_communicators(Transport& transport, const char* what) {
    const auto& g = plan.grid;
    CommunicatorId mine = world_communicator;
    for (int64_t s = 0; s < g.pp; ++s)
      for (int64_t r = 0; r < g.dp; ++r) {
        std::vector<int64_t> members;
        for (int64_t t = 0; t < g.tp; ++t) members.push_back(g.rank_of(s, r, t));
        auto made = transport.make_communicator(members);
        if (!made)
          return make_error(fmt::format("rank {}: {} of ranks {}: {}", rank.rank, what,
                                        fmt::join(members, ", "), made.error().message));
        if (s == plan.place.stage && r == plan.place.replica) mine = *made;
      }
    return mine;
  }

  // Which of a stage's parameters its tensor-parallel group holds whole.
  std::vector<bool> replicated_parameters(const torch::nn::Sequential& model) const {
    std::vector<bool> replicated;
    if (!tensor_group) return replicated;
    auto parameters = model_parameters(model);
    if (!parameters) return replicated;
    for (const torch::Tensor& p : parameters->tensors)
      replicated.push_back(tensor_group->split_of(p.unsafeGetTensorImpl()).replicated);
    return replicated;
  }

  // tp > 1: the replica-0 group's shards come to rank 0, which puts every tensor back
  // together; a replicated tensor must be equal to the bit on every shard.
  // The comm agent's answer to the point-to-point transfer this actor asked for last.
  Status await_transfer(caf::scoped_actor& self, const std::string& what) {
    std::string error;
    bool done = false;
    self->receive([&](collective_done& d) { error = d.error, done = true; },
                  caf::after(timeout()) >> [&] { error = "timed out"; });
    if (!done || !error.empty()) return make_error(fmt::format("{}: {}", what, error));
    return {};
  }

  // `flat`: this rank's shard of every tensor of the model, in model order, when it takes
  // part (the first replica's first stage); otherwise what the rank keeps.
  Result<torch::Tensor> gather_shards(caf::scoped_actor& self, torch::Tensor flat) {
    const int64_t tp = config.parallel.tp;
    if (plan.place.replica != 0 || plan.place.stage != 0) return flat;
    auto mine = std::make_shared<HostBuffer>(static_cast<std::size_t>(flat.numel()) * sizeof(float));
    std::memcpy(mine->data(), flat.data_ptr<float>(), mine->bytes());
    auto transfer = [&](auto request, const std::string& what) -> Status {
      self->send(comm, std::move(request));
      return await_transfer(self, what);
    };
    const std::size_t count = static_cast<std::size_t>(flat.numel());
    if (rank.rank != 0) {
      auto sent = transfer(
          send_request{0, float_span(mine, 0, count), 0, caf::actor_cast<caf::actor>(self), std::nullopt},
          "sending this shard's parameters to rank 0");
      if (!sent) return fail(sent.error().message);
      return flat;
    }
    std::vector<torch::Tensor> shards{flat};
    for (int64_t t = 1; t < tp; ++t) {
      auto buffer = std::make_shared<HostBuffer>(count * sizeof(float));
      auto got = transfer(
          recv_request{0, float_span(buffer, 0, count), t, caf::actor_cast<caf::actor>(self), std::nullopt},
          fmt::format("receiving shard {}'s parameters", t));
      if (!got) return fail(got.error().message);
      shards.push_back(
          torch::from_blob(buffer->data(), {static_cast<int64_t>(count)}, torch::kFloat32).clone());
    }
    return join_model(shards);
  }

  // By tensor, as the model was given (ZeRO stage 3 has since swapped most tensors' data
  // out): each shard's shape and how it is split.
  Result<torch::Tensor> join_model(const std::vector<torch::Tensor>& shards) {
    std::vector<torch::Tensor> whole;
    int64_t offset = 0;
    for (std::size_t k = 0; k < model_tensors.size(); ++k) {
      const std::vector<int64_t>& shape = model_tensors[k].shape;
      const int64_t count = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
      const TensorSplit split = tensor_splits[k];
      std::vector<torch::Tensor> pieces;
      for (const torch::Tensor& shard : shards) pieces.push_back(shard.narrow(0, offset, count).view(shape));
      offset += count;
      if (split.replicated)
        for (std::size_t t = 1; t < pieces.size(); ++t)
          if (!torch::equal(pieces[t], pieces[0]))
            return fail(
                fmt::format("shard {}'s copy of the replicated parameter {} differs from shard 0's by up to "
                            "{}",
                            t, model_tensors[k].name, (pieces[t] - pieces[0]).abs().max().item<double>()));
      whole.push_back(tp::join_shards(pieces, split).reshape({-1}));
    }
    return torch::cat(whole);
  }

  // A weight tied across stages: replica r of each stage that uses it sums its gradients
  // with replica r of the others (ties in model order, replicas in order, on every rank).
  Status tie_stages(Transport& transport) {
    for (std::size_t t = 0; t < plan.ties.size(); ++t) {
      const PipelineTie& tie = plan.ties[t];
      for (int64_t r = 0; r < config.parallel.dp; ++r)
        for (int64_t shard = 0; shard < config.parallel.tp; ++shard) {
          std::vector<int64_t> members;
          for (int64_t s : tie.stages) members.push_back(plan.grid.rank_of(s, r, shard));
          auto made = transport.make_communicator(members);
          if (!made)
            return make_error(
                fmt::format("rank {}: the stages sharing {}: {}", rank.rank, tie.name, made.error().message));
          if (r == plan.place.replica && shard == plan.place.shard && plan.tie_parameter[t] >= 0)
            ties.push_back(TiedWeight{static_cast<std::size_t>(plan.tie_parameter[t]), *made,
                                      tie.stages.front() == plan.place.stage});
        }
    }
    return {};
  }

  // [pipeline] partition = "profile": rank 0 times each layer's forward and backward on its
  // first micro-batch and every rank cuts by those times.
  Status profile(Transport& transport, Trainable& t, std::vector<double>& costs) {
    const int64_t count = static_cast<int64_t>(layers->size());
    std::vector<float> times(static_cast<std::size_t>(count), 0.0f);
    // With tp > 1 rank 0's group times the layers together (their collectives need it).
    if (rank.rank == 0 || (tensor_group && tensor_group->bound())) {
      MicroBatch batch = t.data(0, config.batch.micro_batch_size);
      auto measured = profile_layers(layers, batch, t.loss);
      for (int64_t i = 0; i < count; ++i) times[static_cast<std::size_t>(i)] = static_cast<float>(measured[i]);
    }
    TROUPE_TRY(transport.broadcast_sync(times.data(), times.size(), 0));
    costs.assign(times.begin(), times.end());
    return {};
  }

  // [pipeline] partition = "profile" with tp > 1: rank 0's tensor-parallel group (the first
  // stage's first replica, made before the plan that says where every rank is) binds
  // its layers to a communicator of its own for timing them; the plan's groups replace it.
  Status bind_profiling_group(const std::shared_ptr<Transport>& transport) {
    const pipeline::Grid grid{config.parallel.dp, config.parallel.pp, config.parallel.order,
                              config.parallel.tp};
    std::vector<int64_t> members;
    for (int64_t t = 0; t < grid.tp; ++t) members.push_back(grid.rank_of(0, 0, t));
    auto made = transport->make_communicator(members);
    if (!made)
      return make_error(
          fmt::format("rank {}: the tensor-parallel group of ranks {} that times the layers: {}", rank.rank,
                      fmt::join(members, ", "), made.error().message));
    if (std::find(members.begin(), members.end(), rank.rank) != members.end())
      tensor_group->bind(make_transport_tensor_comm(
          transport, *made, config.cluster.collective_timeout_s,
          fmt::format("the tensor-parallel group of ranks {} timing the layers", fmt::join(members, ", "))));
    return {};
  }

  // pp > 1: each stage's first replica sends its chunks' parameters to rank 0 (chunk by
  // chunk), which lays every virtual stage's end to end in the model's order; other ranks
  // keep their own chunks'.
  Result<torch::Tensor> gather_stages(caf::scoped_actor& self,
                                      std::vector<std::shared_ptr<HostBuffer>> mine) {
    auto wait = [&](const std::string& what) { return await_transfer(self, what); };
    auto as_tensor = [](const std::shared_ptr<HostBuffer>& b) {
      return torch::from_blob(b->data(), {static_cast<int64_t>(b->bytes() / sizeof(float))}, torch::kFloat32);
    };
    // With tp > 1 each shard gathers its own stages, on its first rank (rank `shard`).
    const int64_t collector = plan.grid.rank_of(0, 0, plan.place.shard);
    if (rank.rank != collector) {
      std::vector<torch::Tensor> kept;
      for (std::size_t c = 0; c < mine.size(); ++c) {
        if (plan.place.replica == 0) {
          std::size_t count = mine[c]->bytes() / sizeof(float);
          self->send(comm, send_request{0, float_span(mine[c], 0, count), collector,
                                        caf::actor_cast<caf::actor>(self), std::nullopt});
          if (auto sent = wait(fmt::format("sending virtual stage {}'s parameters to rank {}",
                                           plan.virtual_stage(static_cast<int64_t>(c)), collector));
              !sent)
            return fail(sent.error().message);
        }
        kept.push_back(as_tensor(mine[c]).clone());
      }
      return torch::cat(kept);
    }
    std::vector<torch::Tensor> parts;
    std::map<std::size_t, torch::Tensor> owned;  // tied weights, by tensor: the owner's copy
    for (int64_t vs = 0; vs < plan.layout.virtual_stages(); ++vs) {
      const int64_t holder = plan.layout.rank_of(vs);
      torch::Tensor flat;
      std::shared_ptr<HostBuffer> buffer;
      if (holder == plan.place.stage) {
        flat = as_tensor(mine[static_cast<std::size_t>(plan.layout.chunk_of(vs))]);
      } else {
        auto count = static_cast<std::size_t>(plan.stage_elements(static_cast<std::size_t>(vs)));
        buffer = std::make_shared<HostBuffer>(count * sizeof(float));
        const int64_t from = plan.grid.rank_of(holder, 0, plan.place.shard);
        self->send(comm, recv_request{0, float_span(buffer, 0, count), from,
                                      caf::actor_cast<caf::actor>(self), std::nullopt});
        if (auto got = wait(fmt::format("receiving virtual stage {}'s parameters from rank {}", vs, from));
            !got)
          return fail(got.error().message);
        flat = as_tensor(buffer);
      }
      auto kept = without_copies(flat, vs, owned);
      if (!kept) return fail(kept.error().message);
      parts.push_back(*kept);
    }
    return torch::cat(parts);
  }

  // Stage `s`'s parameters, flat, less its copies of weights an earlier stage owns: what
  // is left, stage after stage, is every tensor once in the model's order. Every copy
  // must equal its owner's to the bit (same gradients, same update): a difference is an
  // error naming the weight, not a silent choice of one.
  Result<torch::Tensor> without_copies(const torch::Tensor& flat, int64_t s,
                                       std::map<std::size_t, torch::Tensor>& owned) const {
    std::vector<torch::Tensor> kept;
    int64_t offset = 0;
    for (const StageTensor& t : plan.stage_tensors[static_cast<std::size_t>(s)]) {
      torch::Tensor piece = flat.narrow(0, offset, t.elements);
      offset += t.elements;
      auto owner = owned.find(t.tensor);
      if (t.copy && owner != owned.end() && !torch::equal(piece, owner->second)) {
        double apart = (piece - owner->second).abs().max().item<double>();
        return make_error(
            fmt::format("stage {}'s copy of the tied weight {} differs from its owner's by up to {}", s,
                        tie_name(t.tensor), apart));
      }
      if (t.copy) continue;
      kept.push_back(piece.clone());
      owned[t.tensor] = kept.back();
    }
    return kept.empty() ? torch::empty({0}, torch::kFloat32) : torch::cat(kept);
  }

  std::string tie_name(std::size_t tensor) const {
    for (const PipelineTie& tie : plan.ties)
      if (tie.tensor == tensor) return tie.name;
    return "#" + std::to_string(tensor);
  }

  // Where this rank's part of the model's tensor `t` lies in the whole tensor.
  TensorShard shard_of(std::size_t t) const {
    TensorShard shard{model_tensors[t].shape};
    if (tensor_splits.empty() || tensor_splits[t].replicated) return shard;
    const TensorSplit split = tensor_splits[t];
    shard.whole_shape[static_cast<std::size_t>(split.dim)] *= config.parallel.tp;
    shard.dim = split.dim;
    shard.blocks = split.blocks;
    shard.index = plan.place.shard;
    shard.parts = config.parallel.tp;
    return shard;
  }

  // [checkpoint]: each chunk's layout (what it owns, by parameter name and element range),
  // the writer when saving, and on resume every chunk's state put back.
  Status prepare_checkpoints() {
    const CheckpointConfig& c = config.checkpoint;
    if (c.every_steps == 0 && c.resume.empty()) return {};
    caf::scoped_actor self{*system};
    checkpoint.rank = rank.rank;
    checkpoint.replica = plan.place.replica;
    checkpoint.dp = config.parallel.dp;
    checkpoint.shard = plan.place.shard;
    checkpoint.zero = config.zero.policy();
    checkpoint.arrays = checkpoint_arrays(config.optimizer);
    for (std::size_t chunk = 0; chunk < stages.size(); ++chunk) {
      ChunkCheckpoint cc;
      cc.virtual_stage = plan.virtual_stage(static_cast<int64_t>(chunk));
      std::string error;
      self->request(stages[chunk], timeout(), describe_stage{})
          .receive([&](stage_layout& l) { cc.layout = std::move(l); },
                   [&](caf::error& e) { error = system->render(e); });
      if (error.empty()) error = cc.layout.error;
      if (!error.empty()) return fail("describing the checkpoint layout: " + error);
      for (const StageTensor& t : plan.stage_tensors[static_cast<std::size_t>(cc.virtual_stage)]) {
        cc.names.push_back(tensor_names[t.tensor]);
        cc.shards.push_back(shard_of(t.tensor));
      }
      checkpoint.chunks.push_back(std::move(cc));
    }
    if (c.every_steps > 0) {
      CheckpointWriterOptions o;
      o.root = c.dir;
      o.rank = rank.rank;
      o.world_size = rank.world_size;
      o.keep_last = c.keep_last;
      std::vector<ModelTensor> whole;  // the manifest lists the model's tensors, not this rank's slices
      for (std::size_t t = 0; t < model_tensors.size(); ++t)
        whole.push_back(ModelTensor{model_tensors[t].name, shard_of(t).whole_shape});
      o.meta = checkpoint_meta(config, checkpoint.arrays, whole);
      o.comm_agent = comm;
      o.tracer = tracer.get();
      if (const char* delay = std::getenv("TROUPE_CHECKPOINT_WRITE_DELAY_MS"))
        o.write_delay = std::chrono::milliseconds(std::strtoll(delay, nullptr, 10));
      checkpoint_writer = spawn_checkpoint_writer(*system, std::move(o));
    }
    return resume(self);
  }

  Status resume(caf::scoped_actor& self) {
    auto folder = resume_folder(config.checkpoint);
    if (!folder) return fail("[checkpoint] resume: " + folder.error().message);
    if (!*folder) {
      if (rank.rank == 0 && !config.checkpoint.resume.empty())
        spdlog::info("no complete checkpoint under {}: starting afresh", config.checkpoint.dir);
      return {};
    }
    auto loaded = load_rank_checkpoint(**folder, checkpoint);
    if (!loaded) return fail("[checkpoint] resume: " + loaded.error().message);
    for (std::size_t chunk = 0; chunk < stages.size(); ++chunk) {
      state_restored done;
      std::string error;
      self->request(stages[chunk], timeout(), std::move(loaded->chunks[chunk]))
          .receive([&](state_restored& r) { done = std::move(r); },
                   [&](caf::error& e) { error = system->render(e); });
      if (error.empty()) error = done.error;
      if (!error.empty()) return fail(fmt::format("[checkpoint] resume from {}: {}", **folder, error));
    }
    if (!loaded->rng_state.empty()) set_rng_state(loaded->rng_state);
    steps_done = loaded->step;
    if (loaded->samples >= 0) {  // the data goes on where it was, whatever the global batch now
      data_at = data_position{loaded->step, loaded->samples};
      self->send(loader, data_at);
    }
    if (rank.rank == 0) spdlog::info("resumed from {} after step {}", **folder, steps_done);
    return {};
  }

  // The save after this step: the previous save must be done (its snapshot buffers are
  // free again), then each chunk's state is copied between steps and handed to the
  // writer; with async = false the step also waits for the write.
  Status save_checkpoint(caf::scoped_actor& self) {
    if (last_save >= 0) TROUPE_TRY(await_save(self, last_save));
    std::vector<stage_snapshot> snapshots;
    for (const caf::actor& chunk : stages) {
      stage_snapshot snap;
      std::string error;
      self->request(chunk, timeout(), snapshot_stage{})
          .receive([&](stage_snapshot& got) { snap = std::move(got); },
                   [&](caf::error& e) { error = system->render(e); });
      if (error.empty()) error = snap.error;
      if (!error.empty()) return fail(fmt::format("checkpoint of step {}: {}", steps_done, error));
      snapshots.push_back(std::move(snap));
    }
    self->send(
        checkpoint_writer,
        write_checkpoint{steps_done, rank_checkpoint_files(
                                         checkpoint, steps_done, snapshots, rng_state(),
                                         data_at.samples_after(steps_done, config.batch.global_batch_size))});
    last_save = steps_done;
    if (!config.checkpoint.async) TROUPE_TRY(await_save(self, steps_done));
    return {};
  }

  // Waits for the save of `step` (-1: every save) to be done, or fails naming why.
  Status await_save(caf::scoped_actor& self, int64_t step) {
    checkpoint_saved saved;
    std::string error;
    auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(step_timeout_s() + 600));
    self->request(checkpoint_writer, limit, await_checkpoint{step})
        .receive([&](checkpoint_saved& s) { saved = std::move(s); },
                 [&](caf::error& e) { error = system->render(e); });
    if (error.empty()) error = saved.error;
    if (!error.empty())
      return fail(step < 0 ? fmt::format("a checkpoint failed: {}", error)
                           : fmt::format("the checkpoint of step {} failed: {}", step, error));
    return {};
  }

  static std::vector<char> rng_state() {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    torch::Tensor state = generator.get_state();
    const auto* bytes = static_cast<const char*>(state.data_ptr());
    return std::vector<char>(bytes, bytes + state.numel());
  }

  static void set_rng_state(const std::vector<char>& bytes) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    torch::Tensor state = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
    generator.set_state(state);
  }

  std::chrono::milliseconds timeout() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(step_timeout_s()));
  }

  Error fail(const std::string& what) {
    failed = true;
    caf::anon_send(comm, abort_request{what});
    return make_error(fmt::format("rank {}: {}", rank.rank, what));
  }
};

Result<std::unique_ptr<Engine>> Engine::make(JobConfig config, Trainable trainable,
                                             std::optional<RankEnvironment> rank) {
  auto resolved = resolve_config(std::move(config));
  if (!resolved) return resolved.error();
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(*resolved);
  auto found = find_rank(impl->config, std::move(rank));
  if (!found) return found.error();
  impl->rank = *found;
  if (!trainable.layers || !trainable.loss || !trainable.data)
    return make_error("Engine::make needs layers, a loss function and a data source");
  if (impl->config.precision.dtype != Dtype::fp32 && trainable.make_optimizer)
    return make_error(fmt::format(
        "rank {}: [precision] dtype = \"{}\" runs the [optimizer] as troupe's fused kernels over fp32 "
        "master weights; a trainer's own optimizer factory trains fp32 only: drop make_optimizer or "
        "set dtype = \"fp32\"",
        impl->rank.rank, name_of(impl->config.precision.dtype)));
  auto parameters = model_parameters(trainable.layers);  // what troupe cannot train stops here
  if (!parameters) return make_error(fmt::format("rank {}: {}", impl->rank.rank, parameters.error().message));
  if (!impl->config.model.init_from.empty() && !trainable.starts_from_init)
    if (Status loaded = load_initial_parameters(impl->config.model, *parameters); !loaded)
      return make_error(fmt::format("rank {}: {}", impl->rank.rank, loaded.error().message));
  impl->tensor_names = parameters->names;
  for (std::size_t t = 0; t < parameters->tensors.size(); ++t)
    impl->model_tensors.push_back(ModelTensor{parameters->names[t], parameters->tensors[t].sizes().vec()});
  const bool on_gpu = impl->config.cluster.device == DeviceKind::cuda;
  auto requested = device_path_on_cpu();  // the device path on the CPU: tests without a GPU
  if (!requested) return make_error(fmt::format("rank {}: {}", impl->rank.rank, requested.error().message));
  const bool stand_in = *requested && !on_gpu;
  if (stand_in)
    TROUPE_TRY(check_device_path(impl->config, impl->config.origins,
                                 fmt::format("the device path on the CPU ({}=cpu)", kDevicePathVariable)));
  if (impl->config.parallel.tp > 1) {
    TROUPE_TRY(check_tensor_parallel(impl->config, impl->rank, trainable));
    impl->tensor_group = trainable.tensor_parallel;
    for (const torch::Tensor& p : parameters->tensors)
      impl->tensor_splits.push_back(impl->tensor_group->split_of(p.unsafeGetTensorImpl()));
    if (impl->rank.local_world_size < impl->config.parallel.tp && impl->rank.rank == 0)
      spdlog::warn(
          "[parallel] tp = {} is more than the {} ranks on this host: a tensor-parallel group then spans "
          "hosts, and the collectives in every layer's forward and backward cross the network",
          impl->config.parallel.tp, impl->rank.local_world_size);
  }
  const CheckpointConfig& saving = impl->config.checkpoint;
  if ((saving.every_steps > 0 || !saving.resume.empty()) && trainable.make_optimizer)
    return make_error(fmt::format(
        "rank {}: [checkpoint] saves the state of the [optimizer] troupe's kernels run; a trainer's own "
        "optimizer factory keeps its state inside LibTorch's optimizer, which troupe cannot save: drop "
        "make_optimizer or the [checkpoint] section",
        impl->rank.rank));
  std::vector<std::string> warnings;
  auto schedule = make_lr_schedule(impl->config, &warnings);
  if (!schedule) return schedule.error();
  if (impl->rank.rank == 0)
    for (const std::string& w : warnings) spdlog::warn("{}", w);
  if (!schedule->constant()) impl->lr_schedule = std::make_shared<const LrSchedule>(*schedule);
  if (on_gpu) TROUPE_TRY(usable_gpu(impl->rank, impl->config.cluster.share_gpus));
  impl->layers = trainable.layers;
  impl->compute_threads = threads_per_rank(impl->config, impl->rank);
  torch::set_num_threads(static_cast<int>(impl->compute_threads));
  if (!impl->config.trace.path.empty()) impl->tracer = std::make_unique<Tracer>(impl->rank.rank);

  if (auto usable =
          check_nvme_tier(impl->config.offload, offload_options(impl->config, impl->rank.rank), impl->rank);
      !usable)
    return make_error(fmt::format("rank {}: {}", impl->rank.rank, usable.error().message));
  auto options = transport_options(impl->config, impl->rank);
  if (!options) return options.error();
  options->tracer = impl->tracer.get();
  auto transport = Transport::make(*options);
  if (!transport) return make_error(fmt::format("rank {}: {}", impl->rank.rank, transport.error().message));
  std::shared_ptr<Transport> shared = std::move(*transport);
  impl->sent = shared->bytes_sent();
  CommunicatorId slice = world_communicator;
  if (impl->config.parallel.tp > 1) {
    auto made = make_shard_slices(*shared, impl->config.parallel.tp, impl->rank.rank);
    if (!made) return make_error(fmt::format("rank {}: {}", impl->rank.rank, made.error().message));
    slice = *made;
  }
  auto equal = broadcast_parameters(*shared, std::move(parameters->tensors), slice);
  if (!equal)
    return make_error(
        fmt::format("rank {}: broadcasting parameters: {}", impl->rank.rank, equal.error().message));
  if (impl->tensor_group && profiles_layers(impl->config)) TROUPE_TRY(impl->bind_profiling_group(shared));
  TROUPE_TRY(impl->plan_stages(*shared, trainable));
  if (impl->tensor_group)
    impl->tensor_group->bind(
        make_transport_tensor_comm(shared, impl->tensor_comm, impl->config.cluster.collective_timeout_s,
                                   fmt::format("the tensor-parallel group of ranks {}",
                                               fmt::join(impl->plan.place.tensor_parallel_group, ", "))));
  for (std::size_t c = 0; c < impl->chunk_tensor_comms.size(); ++c)
    impl->chunk_tensor_collectives.push_back(make_transport_tensor_comm(
        shared, impl->chunk_tensor_comms[c], impl->config.cluster.collective_timeout_s,
        fmt::format("chunk {}'s tensor-parallel group of ranks {}", c + 1,
                    fmt::join(impl->plan.place.tensor_parallel_group, ", "))));
  if (on_gpu) TROUPE_TRY(impl->open_gpu(*shared));
  if (stand_in) impl->device = std::make_unique<StandInDevice>(impl->tracer.get());
  impl->start_actors(std::move(shared), trainable);
  TROUPE_TRY(impl->prepare_checkpoints());
  impl->step_flops = trainable.step_flops;
  if (impl->rank.rank == 0) {
    if (impl->step_flops > 0) impl->gemm_peak = gemm_peak_flops(1024, name_of(impl->config.precision.dtype));
    impl->monitor = TrainingMonitor::make(impl->config.monitor, impl->steps_done);  // after a resume's step
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

StepMetrics step_metrics(const StepResult& r, int64_t steps_total) {
  StepMetrics m{r.step, steps_total, r.loss, r.tokens_per_s, r.step_ms, r.tokens};
  m.grad_norm = r.stats.grad_norm;
  m.model_state_bytes = r.stats.model_state_bytes;
  m.parameter_bytes = r.stats.parameter_bytes;
  m.gradient_bytes = r.stats.gradient_bytes;
  m.optimizer_state_bytes = r.stats.optimizer_state_bytes;
  m.communication_bytes = r.stats.communication_bytes;
  m.activation_bytes = r.stats.activation_bytes;
  m.device_bytes = r.stats.device_bytes;
  m.bubble = r.stats.bubble;
  m.lr = r.stats.lr;
  m.sent_bytes = r.sent_bytes;
  m.loss_scale = r.stats.loss_scale;
  m.skipped = r.stats.skipped;
  m.step_flops = r.step_flops;
  m.mfu = r.mfu;
  return m;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() {
  if (impl_) impl_->record_held_step();  // a trainer that ends without finish(): its last step too
}

int64_t Engine::rank() const {
  return impl_->rank.rank;
}
int64_t Engine::world_size() const {
  return impl_->rank.world_size;
}
int64_t Engine::steps_done() const {
  return impl_->steps_done;
}
const JobConfig& Engine::config() const {
  return impl_->config;
}

Result<torch::Tensor> Engine::gather_parameters() {
  Impl& m = *impl_;
  if (m.failed) return make_error(fmt::format("rank {}: the engine has failed", m.rank.rank));
  caf::scoped_actor self{*m.system};
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(m.step_timeout_s()));
  std::vector<std::shared_ptr<HostBuffer>> flats;  // by chunk
  for (const caf::actor& chunk : m.stages) {
    parameters_collected collected;
    std::string error;
    self->request(chunk, timeout, collect_parameters{})
        .receive([&](parameters_collected& c) { collected = std::move(c); },
                 [&](caf::error& e) { error = m.system->render(e); });
    if (error.empty()) error = collected.error;
    if (error.empty() && !collected.flat) error = "the stage returned no parameters";
    if (!error.empty()) return m.fail("gathering the parameters: " + error);
    flats.push_back(std::move(collected.flat));
  }
  if (m.config.parallel.pp > 1) {
    auto staged = m.gather_stages(self, std::move(flats));
    if (!staged || m.config.parallel.tp == 1) return staged;
    return m.gather_shards(self, *staged);
  }
  if (m.config.parallel.tp > 1)
    return m.gather_shards(
        self,
        torch::from_blob(flats.front()->data(),
                         {static_cast<int64_t>(flats.front()->bytes() / sizeof(float))}, torch::kFloat32)
            .clone());
  auto count = static_cast<int64_t>(flats.front()->bytes() / sizeof(float));
  return torch::from_blob(flats.front()->data(), {count}, torch::kFloat32).clone();
}

Result<StepResult> Engine::train_batch() {
  Impl& m = *impl_;
  if (m.failed)
    return make_error(fmt::format("rank {}: the engine has failed; no further steps", m.rank.rank));
  m.record_held_step();  // no validation followed it
  caf::scoped_actor self{*m.system};
  const uint64_t sent_before = m.sent->load(std::memory_order_relaxed);
  step_report report;
  std::string error;
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(m.step_timeout_s()));
  self->request(m.scheduler, timeout, train_step{m.steps_done})
      .receive([&](step_report& r) { report = std::move(r); },
               [&](caf::error& e) { error = m.system->render(e); });
  if (error.empty()) error = report.error;
  if (!error.empty()) return m.fail(fmt::format("step {} failed: {}", m.steps_done + 1, error));
  ++m.steps_done;
  // The loss is the all-reduced one, so every rank stops at the same step.
  // A step the loss scaler skipped has a norm that is not finite by definition.
  if (!std::isfinite(report.loss) || (!std::isfinite(report.stats.grad_norm) && !report.stats.skipped))
    return m.fail(fmt::format(
        "rank {}: step {} has a loss of {} and a gradient norm of {}: training diverged (a learning rate "
        "too high, or data or a model that overflows float32); stopping",
        m.rank.rank, m.steps_done, report.loss, report.stats.grad_norm));
  StepResult result;
  result.step = m.steps_done;
  result.loss = report.loss;
  result.step_ms = report.step_ms;
  result.tokens = report.tokens;
  result.tokens_per_s = report.step_ms > 0 ? report.tokens / (report.step_ms / 1000.0) : 0;
  result.stats = report.stats;
  result.sent_bytes = static_cast<int64_t>(m.sent->load(std::memory_order_relaxed) - sent_before);
  result.step_flops = m.step_flops;
  if (m.gemm_peak > 0 && result.step_ms > 0)
    result.mfu = m.step_flops / (result.step_ms / 1e3 * static_cast<double>(m.rank.world_size) * m.gemm_peak);
  if (m.monitor)
    m.unrecorded =
        Impl::HeldStep{step_metrics(result, m.config.train.steps), std::chrono::system_clock::now()};
  const int64_t every = m.config.checkpoint.every_steps;
  if (every > 0 && m.steps_done % every == 0) TROUPE_TRY(m.save_checkpoint(self));
  return result;
}

Result<double> Engine::evaluate() {
  Impl& m = *impl_;
  if (m.failed) return make_error(fmt::format("rank {}: the engine has failed; no validation", m.rank.rank));
  if (!m.validates)  // a usage error, not a failure of the cluster: training can go on
    return make_error(
        fmt::format("rank {}: Engine::evaluate() needs Trainable::validation, the samples of a "
                    "validation split ([data] split gives it a share)",
                    m.rank.rank));
  caf::scoped_actor self{*m.system};
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(m.step_timeout_s()));
  // Each batch's mean over the same number of micro-batches: their mean is the pass's.
  double sum = 0;
  const int64_t batches = m.config.train.eval_steps;
  for (int64_t batch = 0; batch < batches; ++batch) {
    eval_report report;
    std::string error;
    self->request(m.scheduler, timeout, eval_step{batch})
        .receive([&](eval_report& r) { report = std::move(r); },
                 [&](caf::error& e) { error = m.system->render(e); });
    if (error.empty()) error = report.error;
    if (!error.empty())
      return m.fail(fmt::format("validation after step {} failed: {}", m.steps_done, error));
    sum += report.loss;
  }
  const double mean = sum / static_cast<double>(batches);
  if (m.unrecorded && m.unrecorded->metrics.step == m.steps_done) m.unrecorded->metrics.val_loss = mean;
  return mean;
}

Status Engine::finish() {
  Impl& m = *impl_;
  if (m.finished) return m.finish_outcome;
  if (m.failed) return make_error(fmt::format("rank {}: the engine has failed", m.rank.rank));
  m.finished = true;  // the finishing protocol runs once, whatever its outcome
  m.finish_outcome = m.finish_rank();
  return m.finish_outcome;
}

Status Engine::Impl::finish_rank() {
  if (checkpoint_writer) {  // every save durable (rank 0: committed) before the rank ends
    caf::scoped_actor self{*system};
    TROUPE_TRY(await_save(self, -1));
  }
  if (tracer) {
    tracer->settle(std::chrono::seconds(2));  // the last work items' spans are in
    TROUPE_TRY(tracer->write(rank_trace_path(config.trace.path, rank.rank)));
  }
  caf::scoped_actor self{*system};
  std::string error;
  auto timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(step_timeout_s()));
  self->request(scheduler, timeout, finish_training{})
      .receive([&](collective_done& d) { error = d.error; },
               [&](caf::error& e) { error = system->render(e); });
  if (!error.empty()) return fail("finishing: " + error);
  record_held_step();
  if (monitor) monitor->finish();  // bounded: says what the disk did not take in time
  if (tracer && rank.rank == 0) {
    std::vector<std::string> parts;
    for (int64_t r = 0; r < rank.world_size; ++r) parts.push_back(rank_trace_path(config.trace.path, r));
    TROUPE_TRY(merge_traces(parts, config.trace.path));
  }
  return {};
}

}  // namespace troupe
