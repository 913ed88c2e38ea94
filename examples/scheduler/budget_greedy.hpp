// A pipeline scheduler troupe does not build in: greedy under an activation budget. Each
// stage, whenever it is free, runs the oldest backward whose gradient has arrived; failing
// that, the next forward whose input has arrived, but only while it holds fewer than
// `budget` micro-batches of activations (forward run, backward not). A budget below 1F1B's
// (p on stage 0) trades idle time for memory; a budget of m is GPipe's memory with 1F1B's
// eagerness. The order is found by running the pipeline at unit costs (a forward one slot,
// a backward two), and troupe's simulated executor checks it again before the job trains.
#pragma once

#include <troupe/scheduler.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace example {

inline std::vector<std::vector<troupe::Action>> budget_greedy(const troupe::ScheduleShape& shape,
                                                              int64_t budget) {
  const int64_t p = shape.stages, m = shape.micro_batches;
  constexpr int64_t never = std::numeric_limits<int64_t>::max();
  // When stage s finished micro-batch i's forward and backward (slot end), or never.
  std::vector<std::vector<int64_t>> forward_done(p, std::vector<int64_t>(m, never)),
      backward_done = forward_done;
  std::vector<int64_t> next_forward(p, 0), next_backward(p, 0), free_at(p, 0);
  std::vector<std::vector<troupe::Action>> order(p);
  auto finished = [&] {
    return std::all_of(next_backward.begin(), next_backward.end(), [&](int64_t b) { return b == m; });
  };
  for (int64_t now = 0; !finished() && now < 8 * m * p + 8; ++now)
    for (int64_t s = 0; s < p; ++s) {
      if (free_at[s] > now) continue;
      const int64_t b = next_backward[s], f = next_forward[s];
      const bool gradient_here =
          b < f && forward_done[s][b] <= now && (s == p - 1 || backward_done[s + 1][b] <= now);
      if (gradient_here) {
        order[s].push_back({troupe::Op::backward, b, 0});
        backward_done[s][b] = free_at[s] = now + 2;
        ++next_backward[s];
      } else if (f < m && f - b < std::max<int64_t>(budget, 1) && (s == 0 || forward_done[s - 1][f] <= now)) {
        order[s].push_back({troupe::Op::forward, f, 0});
        forward_done[s][f] = free_at[s] = now + 1;
        ++next_forward[s];
      }
    }
  return order;
}

}  // namespace example
