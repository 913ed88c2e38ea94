// Messages of the checkpoint writer (actors/checkpoint_writer.hpp).
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe {

/// One file of a save: `bytes` at `data`, which `owner` keeps alive until written.
struct CheckpointBlob {
  std::string name;
  std::shared_ptr<const void> owner;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

/// Write this rank's files of the checkpoint of `step` (await_checkpoint hears the outcome).
struct write_checkpoint {
  int64_t step = 0;
  std::vector<CheckpointBlob> files;
};

/// A request, answered with checkpoint_saved once the save of `step` is done (on rank 0
/// committed, elsewhere this rank's files durable), or with step -1 once no save is pending.
struct await_checkpoint {
  int64_t step = -1;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, await_checkpoint& x) {
  return f(caf::meta::type_name("await_checkpoint"), x.step);
}

struct checkpoint_saved {
  int64_t step = 0;
  std::string error;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_saved& x) {
  return f(caf::meta::type_name("checkpoint_saved"), x.step, x.error);
}

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::write_checkpoint)
