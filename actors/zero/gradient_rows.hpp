// GradientRows: follows autograd as it produces a stage's gradients and posts each
// row of the ZeroPlan's layout for reduction as soon as all of its gradients are
// final, so communication overlaps the rest of backward.
//
// Stages 0-1: every .grad is a view into the store's flat gradient buffer; autograd
// accumulates micro-batches into it in place, and rows are posted during the last
// micro-batch's backward (all-reduced in stage 0, reduce-scattered in stage 1).
// Stages 2-3: each gradient is copied into its row's slot of the BucketPool the moment
// autograd finishes it and .grad is dropped; every micro-batch's rows are posted
// (reduce-scattered, then absorbed into the partition by the shard owner).
// A post-hook on each parameter's gradient accumulator reports the gradient final, and
// marks the parameter used in the step when the gradient it got is defined (LibTorch's
// optimizers skip the others; so does the shard owner, once every rank's marks are in).
// Rows are posted in one fixed order on every rank (the order backward completes them
// when every parameter gets a gradient): a row whose gradients are complete waits for
// the rows before it, so ranks whose backward skips different parameters (unused
// layers, data-dependent branches) still issue the same collectives in the same order.
//
// A split backward (pipeline/action.hpp: backward_input, backward_weight; actors/
// deferred_weights.hpp) interleaves micro-batches: one's input half runs before an
// earlier one's weight half. Its passes are bracketed by begin_split_pass/end_split_pass
// instead: gradients stay in .grad through the passes, and every row is posted, in the
// fixed order, when a micro-batch's weight half ends (stages 2-3: whatever .grad holds is
// taken into slots then) or when the step's last one ends (stages 0-1).
//
// Thread safety: owned by the compute thread (hooks run there too).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "actors/protocol/comm.hpp"
#include "actors/zero/bucket_pool.hpp"
#include "actors/zero/parameter_store.hpp"

namespace troupe {

class GradientRows {
 public:
  /// Row `row` is ready: its gradients are `span` (in `slot` of the pool, stages 2-3), in
  /// the memory the store keeps them in (on a GPU rank, the device's).
  using Post = std::function<void(std::size_t row, std::size_t slot, BufferSpan span)>;
  /// Stage 3: every gradient of row `row` is final, so backward no longer needs it.
  using RowDone = std::function<void(std::size_t row)>;

  GradientRows(std::shared_ptr<ParameterStore> store, std::shared_ptr<BucketPool> pool, Post post,
               RowDone done);
  GradientRows(const GradientRows&) = delete;
  GradientRows& operator=(const GradientRows&) = delete;

  std::size_t row_count() const { return rows_.size(); }
  /// Rows posted per step: every row once (stages 0-1) or once per micro-batch (2-3).
  std::size_t posts_per_step(int64_t micro_count) const;
  /// A new accumulation begins (stages 0-1 zero the flat gradients).
  void begin_step();
  /// Before a micro-batch's backward: `last` says whether it ends the accumulation.
  void begin_micro(bool last);
  /// After a micro-batch's backward: posts the rows that should have been posted but
  /// got no gradient (unused parameters), so every rank posts every row.
  void flush();
  /// Split backward: a pass begins; `finishes` when it is a micro-batch's weight half (or
  /// a whole backward), `step_final` when no gradient of the step comes after it.
  void begin_split_pass(bool finishes, bool step_final);
  /// Split backward: the pass has run; posts what it finished.
  void end_split_pass();
  /// By layout position: 1 where the parameter got a gradient since begin_step(), else 0.
  const std::vector<float>& used() const { return used_; }

 private:
  struct Row {
    std::size_t ready = 0;
    bool complete = false;
    bool posted = false;
    std::size_t slot = 0;
    bool has_slot = false;
  };
  bool posts_now() const { return last_micro_ || store_->policy().reduces_every_micro_batch(); }
  void on_gradient_final(std::size_t position, bool defined);
  void take_gradient(std::size_t position, Row& row, std::size_t k);
  void post(std::size_t k) { post(k, rows_[k]); }
  void post(std::size_t k, Row& row);
  void post_ready_in_order();

  std::shared_ptr<ParameterStore> store_;
  std::shared_ptr<BucketPool> pool_;
  Post post_;
  RowDone done_;
  std::vector<Row> rows_;
  std::vector<std::size_t> order_;  // the order every rank posts rows in
  std::size_t cursor_ = 0;          // rows of order_ posted so far in this micro-batch
  std::vector<GradAccumulator> accumulators_;  // kept alive for the hooks
  bool last_micro_ = false;
  // Split backward: the pass open now.
  struct SplitPass {
    bool open = false;
    bool finishes = false, step_final = false;
  } split_;
  std::vector<float> used_;  // by layout position, as floats: they are all-reduced with the loss
};

}  // namespace troupe
