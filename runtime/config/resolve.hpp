// Resolving a job: derive the values left at 0 and validate every key and every relation
// between keys, before any rank starts.
//
// Derivations: world_size and dp from each other (world_size = dp × pp × tp); the batch
// triple by DeepSpeed's rule global = micro × accumulation × dp; d_ff = 4 × d_model.
// Validation covers ranges (positive sizes, 0 <= beta < 1, ...), host:port syntax, and
// the data file (it must exist and hold more than seq_len + 1 bytes). The first problem
// found is returned as one sentence.
// Thread safety: pure functions, except that data.path is examined on disk.
// Invariants: a resolved config resolves to itself.
#pragma once

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/origins.hpp"

namespace troupe {

/// Derives and validates a config built in code (by an embedding trainer). Messages name
/// `raw.source` and the [section] key, since no file positions are known:
/// "<struct>: [batch] micro_batch_size must be a positive integer, got -1".
Result<JobConfig> resolve_config(JobConfig raw);

/// As above, with messages that start at the recorded origin of the offending key (a
/// file position or a --set override); keys without one fall back to origins.source.
/// Used by the TOML loader.
Result<JobConfig> resolve_config(JobConfig raw, const ConfigOrigins& origins);

/// Whether the device path (a GPU rank's, or its stand-in of CPU streams: `path` names
/// which in the message) runs what `raw` asks for; what it cannot run yet is an error at
/// its key. resolve_config calls it for [cluster] device = "cuda".
Status check_device_path(const JobConfig& raw, const ConfigOrigins& origins, const std::string& path);

/// Whether the pipeline of a resolved `job` fits a model of `layers` layers (`model`
/// names it in the message, e.g. "the [model] GPT"): at most one stage per layer, and an
/// explicit partition that counts every layer. Messages name the key's line.
Status check_pipeline_layers(const JobConfig& job, int64_t layers, const std::string& model);

/// Model chunks per pipeline rank: [pipeline] virtual_stages, or the schedule's own (2 for
/// interleaved_1f1b and zbv); 1 without a pipeline.
int64_t pipeline_chunks(const JobConfig& job);

/// The layer count of each of the job's pp × chunks virtual stages, in model order (the
/// pp stages without virtual stages), cut as [pipeline] partition says: the
/// explicit counts, "uniform", or balanced by `layer_elements` ("parameters") or by
/// `layer_costs` ("flops": the model's FLOPs per layer; "profile": measured times), by
/// `layer_elements` when no costs are given; costs for another number of layers are an
/// error. By layer.
Result<std::vector<int64_t>> stage_layer_counts(const JobConfig& job,
                                                const std::vector<double>& layer_elements,
                                                const std::vector<double>& layer_costs);

}  // namespace troupe
