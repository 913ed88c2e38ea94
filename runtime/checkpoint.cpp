#include "runtime/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "memory/checkpoint_dir.hpp"
#include "memory/checkpoint_ranges.hpp"
#include "runtime/config/choices.hpp"

namespace troupe {
namespace {

std::string index_name(int64_t rank) {
  return fmt::format("rank{:05}.json", rank);
}
std::string rng_name(int64_t rank) {
  return fmt::format("rank{:05}-rng.bin", rank);
}
std::string array_name(int64_t rank, int64_t virtual_stage, const std::string& array) {
  return fmt::format("rank{:05}-vs{:03}-{}.bin", rank, virtual_stage, array);
}

// The elements of a chunk's partition this rank writes: all of it, except where every
// replica holds the whole model (ZeRO 0) and each writes its share.
std::pair<std::size_t, std::size_t> written_range(const RankCheckpoint& r, std::size_t total) {
  if (!r.zero.every_rank_updates_everything()) return {0, total};
  const auto dp = static_cast<std::size_t>(r.dp), replica = static_cast<std::size_t>(r.replica);
  return {total * replica / dp, total * (replica + 1) / dp};
}

nlohmann::json scaler_json(const std::optional<LossScalerState>& s) {
  if (!s) return nullptr;
  return {{"scale", s->scale},
          {"iteration", s->iteration},
          {"last_overflow", s->last_overflow},
          {"hysteresis", s->hysteresis}};
}

std::optional<LossScalerState> scaler_of(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return LossScalerState{j.at("scale").get<double>(), j.at("iteration").get<int64_t>(),
                         j.at("last_overflow").get<int64_t>(), j.at("hysteresis").get<int64_t>()};
}

CheckpointBlob blob_of(std::string name, const std::shared_ptr<std::string>& text) {
  return CheckpointBlob{std::move(name), text, text->data(), text->size()};
}

nlohmann::json shard_json(const TensorShard& s) {
  return {
      {"shape", s.whole_shape}, {"dim", s.dim}, {"blocks", s.blocks}, {"index", s.index}, {"parts", s.parts}};
}

TensorShard shard_of(const nlohmann::json& j) {
  return TensorShard{j.at("shape").get<std::vector<int64_t>>(), j.at("dim").get<int64_t>(),
                     j.at("blocks").get<int64_t>(), j.at("index").get<int64_t>(),
                     j.at("parts").get<int64_t>()};
}

// A tensor-parallel group's members each hold a tensor they do not split; member 0 writes it.
bool writes_tensor(const RankCheckpoint& r, const ChunkCheckpoint& chunk, std::size_t tensor) {
  return r.shard == 0 || tensor >= chunk.shards.size() || !chunk.shards[tensor].whole();
}

}  // namespace

std::vector<std::string> checkpoint_arrays(const OptimizerConfig& optimizer) {
  if (optimizer.type != OptimizerType::sgd) return {"values", "exp_avg", "exp_avg_sq"};
  if (optimizer.momentum != 0) return {"values", "momentum_buffer"};
  return {"values"};
}

namespace {

// The model's family and shape, so that `troupe export --format hf` can describe it.
nlohmann::json model_json(const ModelConfig& m) {
  return {{"type", m.type},
          {"vocab_size", m.vocab_size},
          {"seq_len", m.seq_len},
          {"d_model", m.d_model},
          {"n_layers", m.n_layers},
          {"n_heads", m.n_heads},
          {"n_kv_heads", m.n_kv_heads},
          {"d_ff", m.d_ff},
          {"rope_theta", m.rope_theta},
          {"norm_eps", m.norm_eps},
          {"activation", m.activation},
          {"tie_embeddings", m.tie_embeddings}};
}

ModelConfig model_of(const nlohmann::json& j) {
  ModelConfig m;
  m.type = j.at("type").get<std::string>();
  for (auto [key, field] :
       {std::pair{"vocab_size", &m.vocab_size}, std::pair{"seq_len", &m.seq_len},
        std::pair{"d_model", &m.d_model}, std::pair{"n_layers", &m.n_layers},
        std::pair{"n_heads", &m.n_heads}, std::pair{"n_kv_heads", &m.n_kv_heads}, std::pair{"d_ff", &m.d_ff}})
    *field = j.at(key).get<int64_t>();
  m.rope_theta = j.at("rope_theta").get<double>();
  m.norm_eps = j.at("norm_eps").get<double>();
  m.tie_embeddings = j.at("tie_embeddings").get<bool>();
  m.activation = j.value("activation", std::string("gelu"));
  return m;
}

}  // namespace

std::string checkpoint_meta(const JobConfig& job, const std::vector<std::string>& arrays,
                            const std::vector<ModelTensor>& model) {
  nlohmann::json parameters = nlohmann::json::array();
  for (const ModelTensor& t : model) parameters.push_back({{"name", t.name}, {"shape", t.shape}});
  nlohmann::json meta = {{"world_size", job.cluster.world_size},
                         {"dp", job.parallel.dp},
                         {"pp", job.parallel.pp},
                         {"tp", job.parallel.tp},
                         {"zero_stage", job.zero.stage},
                         {"dtype", name_of(job.precision.dtype)},
                         {"offload_optimizer", name_of(job.offload.optimizer)},
                         {"arrays", arrays},
                         {"parameters", parameters},
                         {"model", model_json(job.model)}};
  return meta.dump();
}

std::vector<CheckpointBlob> rank_checkpoint_files(const RankCheckpoint& r, int64_t step,
                                                  const std::vector<stage_snapshot>& snapshots,
                                                  std::vector<char> rng_state, int64_t samples) {
  std::vector<CheckpointBlob> files;
  nlohmann::json chunks = nlohmann::json::array();
  for (std::size_t c = 0; c < r.chunks.size(); ++c) {
    const ChunkCheckpoint& chunk = r.chunks[c];
    const stage_snapshot& snap = snapshots[c];
    auto [lo, hi] = written_range(r, chunk.layout.partition_elements);
    nlohmann::json names = nlohmann::json::array(), pieces = nlohmann::json::array(),
                   steps = nlohmann::json::object(), shards = nlohmann::json::object();
    for (std::size_t a = 0; a < snap.state.arrays.size(); ++a) {
      std::string name = array_name(r.rank, chunk.virtual_stage, r.arrays[a]);
      const auto& buffer = snap.state.arrays[a];
      files.push_back(CheckpointBlob{name, buffer, buffer->as<float>() + lo, (hi - lo) * sizeof(float)});
      names.push_back(name);
    }
    for (const PartitionPiece& p : chunk.layout.pieces) {
      std::size_t from = std::max(p.at, lo), to = std::min(p.at + p.count, hi);
      if (from >= to || !writes_tensor(r, chunk, p.tensor)) continue;
      pieces.push_back({chunk.names[p.tensor], p.offset + (from - p.at), to - from, from - lo});
      // The step count of each tensor it writes a piece of (every holder's count is the same).
      if (p.tensor < snap.state.steps.size()) steps[chunk.names[p.tensor]] = snap.state.steps[p.tensor];
      if (p.tensor < chunk.shards.size() && !chunk.shards[p.tensor].whole())
        shards[chunk.names[p.tensor]] = shard_json(chunk.shards[p.tensor]);
    }
    chunks.push_back({{"virtual_stage", chunk.virtual_stage},
                      {"arrays", names},
                      {"pieces", pieces},
                      {"steps", steps},
                      {"shards", shards},
                      {"updates_applied", snap.updates_applied},
                      {"scaler", scaler_json(snap.scaler)}});
  }
  auto rng = std::make_shared<std::vector<char>>(std::move(rng_state));
  files.push_back(CheckpointBlob{rng_name(r.rank), rng, rng->data(), rng->size()});
  nlohmann::json index = {
      {"rank", r.rank}, {"step", step}, {"samples", samples}, {"chunks", chunks}, {"rng", rng_name(r.rank)}};
  files.push_back(blob_of(index_name(r.rank), std::make_shared<std::string>(index.dump(1))));
  return files;
}

Result<std::optional<std::string>> resume_folder(const CheckpointConfig& config) {
  if (config.resume.empty()) return std::optional<std::string>();
  if (config.resume != "latest") return std::optional<std::string>(config.resume);
  return latest_checkpoint(config.dir);
}

namespace {

// The checkpoint's files, each read and checked once, on first use.
class CheckpointFiles {
 public:
  CheckpointFiles(std::string dir, const CheckpointManifest& manifest) : dir_(std::move(dir)) {
    for (const CheckpointFile& f : manifest.files) listed_[f.name] = f;
  }
  bool has(const std::string& name) const { return listed_.count(name) > 0; }
  Result<const std::vector<char>*> get(const std::string& name) {
    if (auto it = read_.find(name); it != read_.end()) return &it->second;
    auto listed = listed_.find(name);
    if (listed == listed_.end())
      return make_error(fmt::format("checkpoint {}: its manifest does not list {}", dir_, name));
    auto bytes = read_checkpoint_file(dir_, listed->second);
    if (!bytes) return bytes.error();
    return &(read_[name] = std::move(*bytes));
  }
  std::vector<std::string> indexes() const {
    std::vector<std::string> out;
    for (const auto& [name, file] : listed_)
      if (name.rfind("rank", 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".json")
        out.push_back(name);
    return out;
  }

 private:
  std::string dir_;
  std::map<std::string, CheckpointFile> listed_;
  std::map<std::string, std::vector<char>> read_;
};

// What every rank's index says, gathered: saved ranges by array, step counts by name.
struct SavedState {
  std::vector<std::vector<SavedRange>> ranges;  // by array
  std::map<std::string, int64_t> steps;
  std::map<std::string, TensorShard> shards;  // a slice of each split tensor, as saved
  int64_t updates_applied = 0;
  std::optional<LossScalerState> scaler;
  bool first_chunk = true;
  int64_t samples = -1;  // training samples consumed; -1 in checkpoints from before it was kept
};

Status gather_index(const nlohmann::json& index, std::size_t arrays, SavedState& saved) {
  for (const auto& chunk : index.at("chunks")) {
    const auto& names = chunk.at("arrays");
    if (names.size() != arrays)
      return make_error(fmt::format("it holds {} arrays per partition", names.size()));
    std::map<std::string, TensorShard> shards;
    const nlohmann::json split = chunk.value("shards", nlohmann::json::object());  // older: none
    for (const auto& [name, shard] : split.items()) shards[name] = saved.shards[name] = shard_of(shard);
    for (const auto& p : chunk.at("pieces")) {
      const std::string name = p.at(0).get<std::string>();
      const auto offset = p.at(1).get<std::size_t>(), count = p.at(2).get<std::size_t>(),
                 at = p.at(3).get<std::size_t>();
      auto shard = shards.find(name);
      // Under tensor parallelism a piece is a run of its slice: ranges name the whole tensor's elements.
      for (const ShardRun& run : shard == shards.end()
                                     ? std::vector<ShardRun>{ShardRun{offset, count, offset}}
                                     : whole_runs(shard->second, offset, count))
        for (std::size_t a = 0; a < arrays; ++a)
          saved.ranges[a].push_back(SavedRange{name, run.whole_offset, run.count, names[a].get<std::string>(),
                                               at + (run.shard_offset - offset)});
    }
    for (const auto& [name, count] : chunk.at("steps").items()) saved.steps[name] = count.get<int64_t>();
    if (saved.first_chunk) {
      saved.updates_applied = chunk.at("updates_applied").get<int64_t>();
      saved.scaler = scaler_of(chunk.at("scaler"));
      saved.first_chunk = false;
    }
  }
  return {};
}

Result<SavedState> read_indexes(CheckpointFiles& files, const std::string& dir, const RankCheckpoint& r) {
  SavedState saved;
  saved.ranges.resize(r.arrays.size());
  const auto indexes = files.indexes();
  if (indexes.empty())
    return make_error(fmt::format("checkpoint {} lists no rank index (rankNNNNN.json)", dir));
  for (const std::string& name : indexes) {
    auto bytes = files.get(name);
    if (!bytes) return bytes.error();
    nlohmann::json index = nlohmann::json::parse((*bytes)->begin(), (*bytes)->end(), nullptr, false);
    if (index.is_discarded()) return make_error(fmt::format("checkpoint {}: {} is not JSON", dir, name));
    try {
      saved.samples = index.value("samples", int64_t{-1});
      if (Status ok = gather_index(index, r.arrays.size(), saved); !ok)
        return make_error(fmt::format("checkpoint {}: {}: {}; this job's [optimizer] keeps {} ({})", dir,
                                      name, ok.error().message, r.arrays.size(), fmt::join(r.arrays, ", ")));
    } catch (const nlohmann::json::exception& e) {
      return make_error(fmt::format("checkpoint {}: {} is malformed: {}", dir, name, e.what()));
    }
  }
  return saved;
}

// Fills `into` (fp32) with what `wanted` names, reading the files `saved` points at.
Status fill(CheckpointFiles& files, const std::vector<SavedRange>& saved,
            const std::vector<WantedRange>& wanted, HostBuffer& into) {
  auto reads = plan_reads(saved, wanted);
  if (!reads) return reads.error();
  for (const RangeRead& read : *reads) {
    auto bytes = files.get(read.file);
    if (!bytes) return bytes.error();
    if ((read.from + read.count) * sizeof(float) > (*bytes)->size() ||
        (read.into + read.count) * sizeof(float) > into.bytes())
      return make_error(fmt::format("{} is shorter than its index says", read.file));
    std::memcpy(into.as<float>() + read.into, (*bytes)->data() + read.from * sizeof(float),
                read.count * sizeof(float));
  }
  return {};
}

// What tensor `tensor` of `chunk` wants of elements [offset, offset + count), put at `into`,
// as runs of the whole tensor.
void want(const ChunkCheckpoint& chunk, std::size_t tensor, std::size_t offset, std::size_t count,
          std::size_t into, std::vector<WantedRange>& wanted) {
  const std::string& name = chunk.names[tensor];
  if (tensor >= chunk.shards.size()) {
    wanted.push_back(WantedRange{name, offset, count, into});
    return;
  }
  for (const ShardRun& run : whole_runs(chunk.shards[tensor], offset, count))
    wanted.push_back(WantedRange{name, run.whole_offset, run.count, into + (run.shard_offset - offset)});
}

// A tensor saved in slices of another shape than this job's is another model's.
Status same_shapes(const SavedState& saved, const ChunkCheckpoint& chunk) {
  for (std::size_t t = 0; t < chunk.shards.size(); ++t) {
    auto found = saved.shards.find(chunk.names[t]);
    if (found != saved.shards.end() && found->second.whole_shape != chunk.shards[t].whole_shape)
      return make_error(fmt::format("it saved {} with shape [{}], this model's is [{}]", chunk.names[t],
                                    fmt::join(found->second.whole_shape, ", "),
                                    fmt::join(chunk.shards[t].whole_shape, ", ")));
  }
  return {};
}

Result<restore_stage> load_chunk(CheckpointFiles& files, const SavedState& saved,
                                 const ChunkCheckpoint& chunk, std::size_t arrays) {
  TROUPE_TRY(same_shapes(saved, chunk));
  const stage_layout& l = chunk.layout;
  restore_stage r;
  std::vector<WantedRange> owned;
  for (const PartitionPiece& p : l.pieces) want(chunk, p.tensor, p.offset, p.count, p.at, owned);
  for (std::size_t a = 0; a < arrays; ++a) {
    auto buffer =
        std::make_shared<HostBuffer>(std::max<std::size_t>(l.partition_elements, 1) * sizeof(float));
    std::memset(buffer->data(), 0, buffer->bytes());  // padding between pieces, as a fresh partition has it
    TROUPE_TRY(fill(files, saved.ranges[a], owned, *buffer));
    r.state.arrays.push_back(std::move(buffer));
  }
  std::vector<WantedRange> whole;
  std::size_t held = 0;
  for (std::size_t t = 0; t < l.tensor_elements.size(); ++t)
    if (l.held[t]) {
      want(chunk, t, 0, l.tensor_elements[t], held, whole);
      held += l.tensor_elements[t];
    }
  if (held > 0) {
    r.model_values = std::make_shared<HostBuffer>(held * sizeof(float));
    TROUPE_TRY(fill(files, saved.ranges[0], whole, *r.model_values));
  }
  for (const std::string& name : chunk.names) {
    auto found = saved.steps.find(name);
    if (found == saved.steps.end()) return make_error(fmt::format("it has no step count for {}", name));
    r.state.steps.push_back(found->second);
  }
  r.updates_applied = saved.updates_applied;
  r.scaler = saved.scaler;
  return r;
}

}  // namespace

Result<ConsolidatedParameters> consolidate_parameters(const std::string& dir, bool with_state) {
  auto manifest = read_manifest(dir);
  if (!manifest) return manifest.error();
  ConsolidatedParameters out;
  out.step = manifest->step;
  try {
    nlohmann::json meta = nlohmann::json::parse(manifest->meta);
    out.arrays = meta.at("arrays").get<std::vector<std::string>>();
    for (const auto& p : meta.at("parameters"))
      out.tensors.push_back(
          ModelTensor{p.at("name").get<std::string>(), p.at("shape").get<std::vector<int64_t>>()});
    if (meta.contains("model")) out.model = model_of(meta.at("model"));  // saved since the LLaMA family
  } catch (const nlohmann::json::exception& e) {
    return make_error(
        fmt::format("checkpoint {}: its manifest does not list the model's parameters: {}", dir, e.what()));
  }
  CheckpointFiles files(dir, *manifest);
  RankCheckpoint shape;
  shape.arrays = out.arrays;
  auto saved = read_indexes(files, dir, shape);
  if (!saved) return saved.error();
  out.state.resize(with_state ? out.arrays.size() - 1 : 0);
  for (const ModelTensor& t : out.tensors) {
    std::size_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<std::size_t>(d);
    HostBuffer values(std::max<std::size_t>(count, 1) * sizeof(float));
    for (std::size_t a = 0; a < (with_state ? out.arrays.size() : 1); ++a) {
      if (Status filled = fill(files, saved->ranges[a], {WantedRange{t.name, 0, count, 0}}, values); !filled)
        return make_error(fmt::format("checkpoint {}: {}", dir, filled.error().message));
      auto& into = a == 0 ? out.values.emplace_back() : out.state[a - 1].emplace_back();
      into.assign(values.as<float>(), values.as<float>() + count);
    }
    if (!with_state) continue;
    auto found = saved->steps.find(t.name);
    if (found == saved->steps.end())
      return make_error(fmt::format("checkpoint {}: it has no step count for {}", dir, t.name));
    out.steps.push_back(found->second);
  }
  out.updates_applied = saved->updates_applied;
  out.samples = saved->samples;
  out.scaler = saved->scaler;
  return out;
}

Result<ResumedRank> load_rank_checkpoint(const std::string& dir, const RankCheckpoint& r) {
  auto manifest = read_manifest(dir);
  if (!manifest) return manifest.error();
  CheckpointFiles files(dir, *manifest);
  auto saved = read_indexes(files, dir, r);
  if (!saved) return saved.error();
  ResumedRank resumed;
  resumed.step = manifest->step;
  resumed.samples = saved->samples;
  for (const ChunkCheckpoint& chunk : r.chunks) {
    auto loaded = load_chunk(files, *saved, chunk, r.arrays.size());
    if (!loaded)
      return make_error(fmt::format("checkpoint {} into virtual stage {} of rank {}: {}", dir,
                                    chunk.virtual_stage, r.rank, loaded.error().message));
    resumed.chunks.push_back(std::move(*loaded));
  }
  if (files.has(rng_name(r.rank))) {
    auto rng = files.get(rng_name(r.rank));
    if (!rng) return rng.error();
    resumed.rng_state = **rng;
  }
  return resumed;
}

}  // namespace troupe
