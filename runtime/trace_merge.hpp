// Merges the per-rank trace files (JSON arrays of Chrome-trace events written by
// Tracer::write) into one Perfetto / chrome://tracing timeline.
#pragma once

#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

/// The file one rank writes its own events to, beside the merged `path`.
std::string rank_trace_path(const std::string& path, int64_t rank);

/// Reads every file of `parts`, writes {"traceEvents": [...]} to `path`, removes the parts.
Status merge_traces(const std::vector<std::string>& parts, const std::string& path);

}  // namespace troupe
