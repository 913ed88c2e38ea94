// Fault injection for the loss scaler's tests: TROUPE_INJECT_OVERFLOW="RANK:STEP[,STEP...]"
// makes rank RANK backpropagate an infinite loss at those steps (counted from 1), so its
// gradients, and through the reductions every rank's, overflow: the real detection, skip
// and scale update then run as they would for a real fp16 overflow. The reference trainer
// (one process) injects at the same steps whatever the rank.
// Thread safety: reads the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <set>

namespace troupe {

inline constexpr const char* kInjectOverflowVariable = "TROUPE_INJECT_OVERFLOW";

/// The steps at which `rank` injects (every listed step when `rank` is unset); empty when
/// the variable is unset or names another rank.
std::set<int64_t> injected_overflow_steps(std::optional<int64_t> rank);

}  // namespace troupe
