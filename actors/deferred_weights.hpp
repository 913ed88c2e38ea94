// The backward split in two (pipeline/action.hpp: backward_input, backward_weight). While
// a DeferredWeights::Scope is open on a thread, a layer that can split its backward
// (troupe::linear, runtime/model/linear.hpp) computes only the gradient of its input and
// hands this object the work for its weights' gradients: the input and the output's
// gradient it needs, no weight (the gradient of x·Wᵀ by W needs neither W nor the rest of
// the graph). run() does that work later, when the schedule's weight action comes, and
// accumulates the gradients through autograd, so gradient hooks (the ZeRO reduction's,
// actors/zero/gradient_rows.hpp) see them exactly as they would in a whole backward.
// Layers that cannot split (LayerNorm, embeddings, a trainer's own modules) make their
// weights' gradients in the input half, as a whole backward would.
// Thread safety: a DeferredWeights belongs to the thread that runs the backward (the
// stage's compute stream); Scope is per thread.
#pragma once

#include <torch/types.h>

#include <functional>
#include <utility>
#include <vector>

namespace troupe {

class DeferredWeights {
 public:
  /// The deferred part of one layer's backward: its parameters and their gradients.
  using Work = std::function<std::vector<std::pair<torch::Tensor, torch::Tensor>>()>;

  /// The deferral open on this thread, or null.
  static DeferredWeights* active();

  /// Opens a deferral on this thread into `into` until destroyed (scopes nest).
  class Scope {
   public:
    explicit Scope(DeferredWeights& into);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    DeferredWeights* previous_;
  };

  void defer(Work work) { work_.push_back(std::move(work)); }
  /// Runs every deferred piece of work, in the order deferred, and accumulates the
  /// gradients into their parameters' .grad through autograd (one backward of the leaves).
  void run();

 private:
  std::vector<Work> work_;
};

}  // namespace troupe
