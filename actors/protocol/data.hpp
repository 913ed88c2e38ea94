// Messages of the data loader: micro-batches prepared ahead of use.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <memory>

namespace troupe {

/// A micro-batch's tensors; defined with LibTorch in actors/micro_batch.hpp so that
/// only the actors that touch tensors pay for LibTorch's headers.
struct MicroBatch;
using MicroBatchPtr = std::shared_ptr<const MicroBatch>;

/// Asks for the micro-batch `micro` of global step `step`; answered with micro_batch_ready.
/// With `validation`, micro-batch `micro` of validation batch `step` of the pass.
struct fetch_micro_batch {
  int64_t step = 0;
  int64_t micro = 0;
  bool validation = false;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fetch_micro_batch& x) {
  return f(caf::meta::type_name("fetch_micro_batch"), x.step, x.micro, x.validation);
}

/// Where the training samples stand: after `step` steps, `samples` had been read (a resumed
/// run's position, from its checkpoint); each step from there reads one global batch more.
struct data_position {
  int64_t step = 0;
  int64_t samples = 0;
  int64_t samples_after(int64_t steps, int64_t global_batch) const {
    return samples + (steps - step) * global_batch;
  }
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, data_position& x) {
  return f(caf::meta::type_name("data_position"), x.step, x.samples);
}

struct micro_batch_ready {
  int64_t step = 0;
  int64_t micro = 0;
  MicroBatchPtr batch;
  int64_t tokens = 0;  ///< target elements of the batch (for those that do not read tensors)
};

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::micro_batch_ready)
