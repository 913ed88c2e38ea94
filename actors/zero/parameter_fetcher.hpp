// ParameterFetcher: ZeRO stage 3's gathering of parameter rows around the layers that
// use them. The compute thread asks for a row before a layer runs (forward, and
// through a gate in backward) and gives it back after; a FetchPlanner decides what to
// gather, prefetch and free, and this class carries it out: it allocates the row's
// buffer, has the stage issue the all-gather (the stage actor hears the completion
// and reports it here), waits for it, and binds the parameters to the gathered row.
//
// With the parameter partition on NVMe (the store has a ParameterSwap) a swapped row's
// block is first read from its files straight into this rank's place in the row buffer,
// and the all-gather then runs in place. Gathers take their place in the stage's
// IssueQueue when the fetcher decides on them, so they go out in the same order on every
// rank however the reads complete.
//
// Every wait is bounded by the collective timeout; a failed gather or read fails the waiter.
// Thread safety: acquire/release/begin_pass/end_pass/gather_all on the compute
// thread; on_gathered and fail from any thread.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/protocol/comm.hpp"
#include "actors/zero/issue_queue.hpp"
#include "actors/zero/parameter_store.hpp"
#include "base/trace.hpp"
#include "memory/fetch_planner.hpp"

namespace troupe {

class ParameterFetcher {
 public:
  /// Issues the all-gather of row `row`: this rank's block `input` into `output`.
  using Gather = std::function<void(std::size_t row, BufferSpan input, BufferSpan output)>;

  /// Waits show on the trace's "compute wait" track.
  ParameterFetcher(std::shared_ptr<ParameterStore> store, FetchPlanner::Limits limits, Gather gather,
                   std::shared_ptr<IssueQueue> queue, double timeout_s, Tracer* tracer = nullptr);

  /// A pass of kind `kind` (see FetchPlanner::begin_pass).
  void begin_pass(std::size_t kind = 0);
  /// Row `row` gathered and bound when this returns; throws std::runtime_error on failure.
  void acquire(std::size_t row);
  void release(std::size_t row);
  void end_pass();
  /// Gathers and binds every row (outside a pass: final parameters); call drop_all after.
  void gather_all();
  void drop_all();

  void on_gathered(std::size_t row, const std::string& error);
  void fail(const std::string& error);

  const FetchPlanner& planner() const { return planner_; }

 private:
  // What completions touch: shared with the NVMe reads' callbacks, which may outlive us.
  struct Arrivals {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<bool> arrived;  // by row
    std::string error;
    void fail(const std::string& why);
  };

  void issue(std::size_t row);
  void read_then_gather(std::size_t row, BufferSpan block, BufferSpan whole);
  void wait_for(std::size_t row);
  void drop(std::size_t row);

  std::shared_ptr<ParameterStore> store_;
  FetchPlanner planner_;
  Gather gather_;
  std::shared_ptr<IssueQueue> queue_;
  double timeout_s_;
  Tracer* tracer_;
  std::vector<std::shared_ptr<Buffer>> pending_;  // by row: being gathered into
  std::shared_ptr<Arrivals> arrivals_ = std::make_shared<Arrivals>();
};

/// Identity on `x` in forward; in backward, acquires `row` before the gradient flows
/// on into the layer that produced `x` (so that layer's backward finds its parameters).
torch::Tensor gather_before_backward(const torch::Tensor& x, ParameterFetcher* fetcher, std::size_t row);

}  // namespace troupe
