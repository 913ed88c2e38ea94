#pragma once
// The hops a real pipeline waited on, read from its merged trace: what the simulator's
// point-to-point transfers inside a host cost when measured the way stages pass tensors
// (stage actor, comm agent and transport on each side), not between two bare transports.
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace troupe::sim {

/// Each time a stage's compute waited on its neighbour, the time from the neighbour's last
/// compute end within the wait to this compute's start, in ms. `trace` is a merged trace
/// ({"traceEvents": [...]}, as `[trace] path` writes it) whose compute spans are named
/// "forward S.M.C" and "backward[_input|_weight] S.M.C" on each rank's compute thread; ranks are numbered
/// stage fastest (rank r is stage r mod pp of replica r / pp). A stage's neighbours are the
/// stages before and after it; with `wraps` (interleaved 1F1B, whose last stage's chunk
/// feeds the first stage's next chunk) also the first and last stages of each other. Waits
/// under 50 us are not waits: the next action was queued behind the last.
std::vector<double> critical_hops_ms(const nlohmann::json& trace, int64_t pp, bool wraps = false);

}  // namespace troupe::sim
