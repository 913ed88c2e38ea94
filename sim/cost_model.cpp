#include "sim/cost_model.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "pipeline/topology.hpp"
#include "runtime/config/choices.hpp"
#include "runtime/config/resolve.hpp"
#include "runtime/estimate.hpp"
#include "runtime/model/model_flops.hpp"
#include "runtime/model/model_shape.hpp"
#include "runtime/stage_programs.hpp"
#include "sim/link_model.hpp"

namespace troupe::sim {
namespace {

int64_t element_bytes(Dtype dtype) {
  return dtype == Dtype::fp32 ? 4 : 2;
}

int64_t communication_bytes(const JobConfig& job) {
  return element_bytes(job.precision.reduce_dtype());
}

struct Groups {
  std::vector<int64_t> tensor;  // a tensor-parallel group
  std::vector<int64_t> data;    // stage s's data-parallel group, at shard 0
};

Result<Groups> groups_of(const JobConfig& job, int64_t stage) {
  const pipeline::Grid grid{job.parallel.dp, job.parallel.pp, job.parallel.order, job.parallel.tp};
  auto place = pipeline::place(grid, grid.rank_of(stage, 0, 0));
  if (!place) return place.error();
  return Groups{place->tensor_parallel_group, place->data_parallel_group};
}

ChunkCost chunk_cost(const JobConfig& job, const ClusterSpec& cluster, const std::vector<LayerCost>& layers,
                     const std::vector<int64_t>& layer_elements, int64_t first, int64_t count, bool last,
                     const Groups& groups) {
  const LinkModel links(cluster);
  const int64_t elem = element_bytes(job.precision.dtype);
  const int64_t tokens = job.batch.micro_batch_size * job.model.seq_len;
  const int64_t hidden = tokens * job.model.d_model * elem;
  const int64_t tp = job.parallel.tp;
  ChunkCost c;
  c.first_layer = first;
  c.layers = count;
  double forward = 0, backward = 0, input_half = 0, weight_half = 0;
  int64_t blocks = 0, elements = 0;
  for (int64_t l = first; l < first + count; ++l) {
    const LayerCost& layer = layers[static_cast<std::size_t>(l)];
    forward += layer.forward_s;
    backward += layer.backward_s;
    const bool halves = layer.backward_input_s > 0 || layer.backward_weight_s > 0;
    input_half += halves ? layer.backward_input_s : layer.backward_s / 2;
    weight_half += halves ? layer.backward_weight_s : layer.backward_s / 2;
    elements += layer_elements[static_cast<std::size_t>(l)];
    if (l >= 1 && l <= job.model.n_layers) ++blocks;
  }
  // Tensor parallelism: two all-reduces of the hidden state per block each way (with
  // sequence parallelism an all-gather and a reduce-scatter each, the same bytes), one for
  // the vocabulary-parallel embedding's output.
  Nanos tensor = 0;
  if (tp > 1) {
    const Nanos one = links.all_reduce(hidden, groups.tensor);
    tensor = (2 * blocks + (first == 0 ? 1 : 0)) * one;
  }
  // ZeRO-3 gathers the chunk's parameters for its forward and again for its backward,
  // prefetching each layer's during the one before (beside the computes of the host): only
  // what compute cannot cover, and the first layer's, are waited for.
  Nanos gather_f = 0, gather_b = 0;
  if (job.zero.policy().gathers_before_use() && job.parallel.dp > 1 && count > 0) {
    const Nanos gather = links.all_gather(elements * elem, groups.data, true);
    c.prefetch = gather;
    const Nanos first_layer = gather / count;
    gather_f = first_layer + std::max<Nanos>(0, gather - seconds_to_nanos(forward));
    gather_b = first_layer + std::max<Nanos>(0, gather - seconds_to_nanos(backward));
  }
  c.parameters = elements;
  c.exposed_forward = tensor + gather_f;
  c.exposed_backward = tensor + gather_b;
  c.forward = seconds_to_nanos(forward) + c.exposed_forward;
  c.backward = seconds_to_nanos(backward) + c.exposed_backward;
  c.backward_input = seconds_to_nanos(input_half) + c.exposed_backward;
  c.backward_weight = seconds_to_nanos(weight_half);
  const int64_t shard = job.parallel.sequence_parallel ? tp : 1;
  c.boundary_bytes = last ? 0 : hidden / shard;
  // What the runtime's ledger counts (runtime/estimate.cpp): the chunk's input and output.
  const int64_t input = first == 0 ? tokens * static_cast<int64_t>(sizeof(int64_t)) : hidden;
  const int64_t output = job.model.activation_checkpointing ? 0 : last ? 4 : hidden;
  c.held_bytes = input + output;
  if (cluster.compute == "flops")
    c.saved_bytes = static_cast<int64_t>(static_cast<double>(blocks) * autograd_block_bytes(job));
  return c;
}

// Elements a rank updates per second. A CPU's rate was measured with the device's compute
// threads; a rank with fewer (ranks sharing the host) updates proportionally slower.
Result<double> optimizer_rate(const JobConfig& job, const ClusterSpec& cluster) {
  const DeviceSpec& d = cluster.device;
  const bool host = d.kind == "gpu" && job.offload.optimizer != OffloadTier::none;
  const double rate = host ? d.host_optimizer_elements_per_s : d.optimizer_elements_per_s;
  if (rate <= 0)
    return make_error(
        fmt::format("device {} has no {} optimizer rate (optimizer_elements_per_s); profile it with "
                    "troupe profile-device",
                    d.name, host ? "host" : "device"));
  if (d.kind == "cpu" && d.compute_threads > 0)
    return rate * std::min(1.0, static_cast<double>(rank_threads(job, cluster)) /
                                    static_cast<double>(d.compute_threads));
  return rate;
}

Result<StageCost> stage_cost(const JobConfig& job, const ClusterSpec& cluster, int64_t parameters,
                             const MemoryBytes& model_state) {
  StageCost s;
  s.parameters = parameters;
  s.model_state = model_state;
  const int64_t dp = job.parallel.dp, elem = element_bytes(job.precision.dtype);
  const ZeroPolicy zero = job.zero.policy();
  if (dp > 1) {
    s.reduce_bytes = parameters * communication_bytes(job);
    s.scatter = zero.reduce_scatters();
    // Gathered back after the update: every row (partitioned parameters gather before use).
    if (zero.gathers_after_update(false)) s.gather_bytes = parameters * elem;
  }
  const int64_t updated = zero.partitions_optimizer_state() ? (parameters + dp - 1) / dp : parameters;
  auto rate = optimizer_rate(job, cluster);
  if (!rate) return rate.error();
  double seconds = static_cast<double>(updated) / *rate;
  const DeviceSpec& d = cluster.device;
  if (d.kind == "gpu" && job.offload.optimizer != OffloadTier::none &&
      d.host_link_bandwidth > 0)  // gradients down, parameters up
    seconds += static_cast<double>(updated * (elem + communication_bytes(job))) / d.host_link_bandwidth;
  s.optimizer = seconds_to_nanos(seconds);
  if (job.offload.optimizer == OffloadTier::nvme) {
    // The moments and the fp32 master copy, read before the update and written after, on
    // the host's NVMe shared by its ranks.
    const double state = static_cast<double>(updated) * (8 + (elem == 2 ? 4 : 0));
    const double share = static_cast<double>(cluster.ranks_per_host);
    if (d.nvme_read <= 0 || d.nvme_write <= 0)
      return make_error(
          fmt::format("[offload] optimizer = \"nvme\" but device {} has no NVMe figures", d.name));
    s.swap = seconds_to_nanos(state * share / d.nvme_read + state * share / d.nvme_write);
  }
  return s;
}

double host_capacity(const JobConfig& job, const ClusterSpec& cluster) {
  const DeviceSpec& d = cluster.device;
  if (d.kind != "cpu" || d.cores <= 0) return 0;
  return static_cast<double>(d.cores) / static_cast<double>(rank_threads(job, cluster));
}

}  // namespace

int64_t rank_threads(const JobConfig& job, const ClusterSpec& cluster) {
  return job.train.threads > 0 ? job.train.threads
                               : std::max<int64_t>(1, cluster.device.cores / cluster.ranks_per_host);
}

Result<std::vector<LayerCost>> flops_layer_costs(const JobConfig& job, const ClusterSpec& cluster) {
  auto rate = cluster.device.gemm_rate(name_of(job.precision.dtype));
  if (!rate) return rate.error();
  const double achieved = *rate * cluster.efficiency;
  const int64_t tokens = job.batch.micro_batch_size * job.model.seq_len;
  std::vector<LayerCost> costs;
  for (const LayerFlops& layer :
       model_layer_flops(job.model, job.batch.micro_batch_size, job.model.seq_len, job.parallel.tp)) {
    LayerCost c{layer.forward / achieved, layer.backward / achieved, 0, 0};
    if (layer.forward == 0 && cluster.device.memory_bandwidth > 0)  // a lookup: its rows read and written
      c.forward_s = c.backward_s =
          static_cast<double>(2 * tokens * job.model.d_model * element_bytes(job.precision.dtype)) /
          cluster.device.memory_bandwidth;
    if (job.model.activation_checkpointing) c.backward_s += c.forward_s;  // the forward again
    costs.push_back(c);
  }
  return costs;
}

Result<JobCosts> job_costs(const JobConfig& job, const ClusterSpec& cluster,
                           const std::vector<LayerCost>& layers) {
  if (cluster.world() != job.parallel.dp * job.parallel.pp * job.parallel.tp)
    return make_error(fmt::format("{} has {} ranks ({} hosts of {}) but {} runs dp {} x pp {} x tp {} = {}",
                                  cluster.source, cluster.world(), cluster.hosts, cluster.ranks_per_host,
                                  job.source, job.parallel.dp, job.parallel.pp, job.parallel.tp,
                                  job.parallel.dp * job.parallel.pp * job.parallel.tp));
  const ModelShape shape = model_shape(job.model, job.parallel.tp);
  if (layers.size() != shape.layers.size())
    return make_error(
        fmt::format("{} layer costs for a model of {} layers", layers.size(), shape.layers.size()));
  std::vector<int64_t> elements;
  std::vector<double> element_weights, times;
  for (std::size_t l = 0; l < shape.layers.size(); ++l) {
    elements.push_back(static_cast<int64_t>(
        std::accumulate(shape.layers[l].begin(), shape.layers[l].end(), std::size_t{0})));
    element_weights.push_back(static_cast<double>(elements.back()));
    times.push_back(layers[l].forward_s + layers[l].backward_s);
  }
  auto counts = stage_layer_counts(job, element_weights, times);
  if (!counts) return counts.error();
  auto estimate = estimate_job(job);
  if (!estimate) return estimate.error();

  JobCosts costs;
  const int64_t pp = job.parallel.pp;
  costs.micro_tokens = job.batch.micro_batch_size * job.model.seq_len;
  costs.host_capacity = host_capacity(job, cluster);
  if (costs.host_capacity > 0) costs.collective_demand = 1 / static_cast<double>(rank_threads(job, cluster));
  costs.compute = cluster.compute;
  std::vector<int64_t> stage_parameters(static_cast<std::size_t>(pp), 0);
  int64_t first = 0;
  costs.layout = pipeline_layout(job);
  for (std::size_t v = 0; v < counts->size(); ++v) {
    const int64_t stage = costs.layout.rank_of(static_cast<int64_t>(v));
    auto groups = groups_of(job, stage);
    if (!groups) return groups.error();
    const bool last = v + 1 == counts->size();
    costs.chunks.push_back(chunk_cost(job, cluster, layers, elements, first, (*counts)[v], last, *groups));
    for (int64_t l = first; l < first + (*counts)[v]; ++l)
      stage_parameters[static_cast<std::size_t>(stage)] += elements[static_cast<std::size_t>(l)];
    first += (*counts)[v];
  }
  // A rank holds every chunk's model state and buffers: with virtual stages the estimate's
  // entries are by virtual stage, summed here over the rank's.
  std::vector<MemoryBytes> held(static_cast<std::size_t>(pp));
  if (pp == 1) held[0] = estimate->bytes;
  for (std::size_t v = 0; pp > 1 && v < estimate->stages.size(); ++v)
    for (std::size_t k = 0; k < memory_kind_count; ++k)
      held[static_cast<std::size_t>(costs.layout.rank_of(static_cast<int64_t>(v)))].bytes[k] +=
          estimate->stages[v].bytes.bytes[k];
  for (int64_t s = 0; s < pp; ++s) {
    auto stage = stage_cost(job, cluster, stage_parameters[static_cast<std::size_t>(s)],
                            held[static_cast<std::size_t>(s)]);
    if (!stage) return stage.error();
    costs.stages.push_back(*stage);
  }
  for (const LayerFlops& l : model_layer_flops(job.model, job.batch.micro_batch_size, job.model.seq_len, 1))
    costs.step_flops += (l.forward + l.backward) *
                        static_cast<double>(job.batch.gradient_accumulation_steps * job.parallel.dp);
  return costs;
}

}  // namespace troupe::sim
