// GradientBuckets: the stage's gradients in one flat buffer, cut into buckets that
// are reduced across ranks as soon as backward has produced all of their gradients,
// so communication overlaps the rest of backward.
//
// Parameters are laid out in reverse order (backward produces gradients roughly from
// the last layer to the first), so each bucket is a contiguous range. Every
// parameter's .grad is a view into the flat buffer; autograd accumulates micro-batches
// into it in place. A post-hook on each parameter's gradient accumulator reports when
// its gradient is final for this backward.
//
// Thread safety: owned by the compute stream's thread (hooks run there too).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "actors/protocol/comm.hpp"

namespace troupe {

class GradientBuckets {
 public:
  /// Called on the compute thread when bucket `index` is ready to be reduced.
  using Post = std::function<void(std::size_t index, BufferSpan span)>;

  GradientBuckets(std::vector<torch::Tensor> parameters, int64_t bucket_bytes, Post post);
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  std::size_t bucket_count() const { return buckets_.size(); }
  /// Zeroes every gradient; a new accumulation begins.
  void begin_step();
  /// Before a micro-batch's backward: `last` says whether it ends the accumulation.
  void begin_micro(bool last);
  /// After the last micro-batch's backward: posts buckets whose parameters got no
  /// gradient in it (unused parameters), so every bucket is reduced exactly once.
  void flush();

 private:
  struct Bucket {
    std::size_t begin = 0;  // floats into the flat buffer
    std::size_t count = 0;
    std::size_t parameters = 0;
    std::size_t ready = 0;
    bool posted = false;
  };
  void on_gradient_final(std::size_t parameter);
  void post(std::size_t bucket);

  std::vector<torch::Tensor> parameters_;
  std::shared_ptr<HostBuffer> flat_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;                                // by parameter
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive for the hooks
  Post post_;
  bool last_micro_ = false;
};

}  // namespace troupe
