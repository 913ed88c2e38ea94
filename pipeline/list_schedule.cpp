#include "pipeline/list_schedule.hpp"

#include <deque>
#include <limits>

namespace troupe::pipeline {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct RankRun {
  int64_t held = 0;
  std::vector<int64_t> next_forward, next_backward;  // by chunk: the next micro-batch
  std::deque<Action> weights;                        // input halves run, weight halves not
  std::vector<Action> order;
};

class ListScheduler {
 public:
  ListScheduler(const Layout& layout, int64_t m, int64_t limit)
      : layout_(layout),
        m_(m),
        limit_(limit),
        forward_done_(static_cast<std::size_t>(layout.virtual_stages()), std::vector<int64_t>(m, kNever)),
        input_done_(forward_done_),
        runs_(static_cast<std::size_t>(layout.ranks)) {
    for (RankRun& r : runs_) {
      r.next_forward.assign(static_cast<std::size_t>(layout.chunks), 0);
      r.next_backward.assign(static_cast<std::size_t>(layout.chunks), 0);
    }
  }

  std::vector<std::vector<Action>> run() {
    const auto per_rank = static_cast<std::size_t>(3 * m_ * layout_.chunks);
    // Every slot some rank runs something, or the memory limit holds a rank back until
    // another's backward frees it; the bound only guards against a limit below one chunk.
    const int64_t bound = 4 * static_cast<int64_t>(per_rank) * layout_.ranks + 4 * layout_.virtual_stages();
    for (int64_t now = 0; now < bound; ++now) {
      bool all_done = true;
      for (int64_t rank = 0; rank < layout_.ranks; ++rank) {
        RankRun& r = runs_[static_cast<std::size_t>(rank)];
        if (r.order.size() < per_rank) take(rank, r, now);
        all_done = all_done && r.order.size() == per_rank;
      }
      if (all_done) break;
    }
    std::vector<std::vector<Action>> orders;
    for (RankRun& r : runs_) orders.push_back(std::move(r.order));
    return orders;
  }

 private:
  int64_t& done(std::vector<std::vector<int64_t>>& table, int64_t stage, int64_t micro) {
    return table[static_cast<std::size_t>(stage)][static_cast<std::size_t>(micro)];
  }

  void take(int64_t rank, RankRun& r, int64_t now) {
    const int64_t stages = layout_.virtual_stages();
    // 1. The oldest input half whose gradient is here (ties: the deeper chunk).
    int64_t best_chunk = -1, best_micro = kNever;
    for (int64_t c = layout_.chunks - 1; c >= 0; --c) {
      const int64_t i = r.next_backward[static_cast<std::size_t>(c)];
      const int64_t stage = layout_.virtual_stage(rank, c);
      if (i >= m_ || done(forward_done_, stage, i) > now) continue;
      if (stage + 1 < stages && done(input_done_, stage + 1, i) > now) continue;
      if (i < best_micro) best_chunk = c, best_micro = i;
    }
    if (best_chunk >= 0) {
      ++r.next_backward[static_cast<std::size_t>(best_chunk)];
      done(input_done_, layout_.virtual_stage(rank, best_chunk), best_micro) = now + 1;
      r.order.push_back({Op::backward_input, best_micro, best_chunk});
      r.weights.push_back({Op::backward_weight, best_micro, best_chunk});
      return;
    }
    // 2. A forward whose input is here, the deepest virtual stage first.
    if (r.held < limit_) {
      int64_t pick = -1, deepest = -1;
      for (int64_t c = 0; c < layout_.chunks; ++c) {
        const int64_t i = r.next_forward[static_cast<std::size_t>(c)];
        const int64_t stage = layout_.virtual_stage(rank, c);
        if (i >= m_ || (stage > 0 && done(forward_done_, stage - 1, i) > now)) continue;
        if (stage > deepest) pick = c, deepest = stage;
      }
      if (pick >= 0) {
        const int64_t i = r.next_forward[static_cast<std::size_t>(pick)]++;
        done(forward_done_, deepest, i) = now + 1;
        ++r.held;
        r.order.push_back({Op::forward, i, pick});
        return;
      }
    }
    // 3. The oldest weight half.
    if (!r.weights.empty()) {
      r.order.push_back(r.weights.front());
      r.weights.pop_front();
      --r.held;
    }
  }

  const Layout layout_;
  const int64_t m_, limit_;
  std::vector<std::vector<int64_t>> forward_done_, input_done_;  // by virtual stage, micro-batch: slot end
  std::vector<RankRun> runs_;
};

}  // namespace

std::vector<std::vector<Action>> list_schedule(const Layout& layout, int64_t micro_batches,
                                               int64_t memory_limit) {
  return ListScheduler(layout, micro_batches, memory_limit).run();
}

}  // namespace troupe::pipeline
