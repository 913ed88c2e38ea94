// LayerSequenceCheck: ZeRO stage 3 gathers each layer's parameters together with every
// other rank, so every rank must run the same layers in the same order. Before each
// micro-batch's forward, the ranks all-gather a digest of the layer sequence they are
// about to run; on a difference they all-gather the sequences themselves and every
// rank stops with an error naming the step, the micro-batch, the position and the
// layers — instead of gathering mismatched rows (silently wrong when two layers have
// the same shape) or waiting for a gather no peer issues.
// Thread safety: agree on the compute thread; on_gathered and fail from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/protocol/comm.hpp"
#include "base/trace.hpp"

namespace troupe {

class LayerSequenceCheck {
 public:
  /// Issues an all-gather numbered `id`: every rank's `input` into `output`.
  using Gather = std::function<void(uint64_t id, BufferSpan input, BufferSpan output)>;

  LayerSequenceCheck(int64_t dp, int64_t rank, std::vector<std::string> layer_names, Gather gather,
                     double timeout_s, Tracer* tracer = nullptr);

  /// Returns when every rank runs `layers` at (step, micro); throws std::runtime_error
  /// naming the difference otherwise (or when the exchange fails).
  void agree(int64_t step, int64_t micro, const std::vector<int64_t>& layers);

  void on_gathered(uint64_t id, const std::string& error);
  void fail(const std::string& error);

 private:
  void exchange(uint64_t id, const std::shared_ptr<HostBuffer>& buffer, std::size_t int64s_per_rank);
  std::string describe(int64_t step, int64_t micro, const std::shared_ptr<HostBuffer>& sequences,
                       std::size_t width) const;
  std::string layer_name(int64_t layer) const;

  int64_t dp_;
  int64_t rank_;
  std::vector<std::string> names_;
  Gather gather_;
  double timeout_s_;
  Tracer* tracer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> arrived_{false, false};
  std::string error_;
};

}  // namespace troupe
