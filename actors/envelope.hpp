// The envelope of an actor message between ranks: which actor it is for, (role, index),
// and the CAF message itself, serialized with CAF's binary serializer.
// Layout: u32 role length | role | i64 index | serialized message.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/message.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

struct Envelope {
  std::string role;
  int64_t index = 0;
  caf::message message;
};

/// Serializes; fails if the message holds a type the actor system cannot serialize.
Result<std::vector<uint8_t>> pack_envelope(caf::actor_system& system, const Envelope& envelope);
/// Checks bounds and deserializes; fails on anything malformed.
Result<Envelope> unpack_envelope(caf::actor_system& system, const std::vector<uint8_t>& bytes);

}  // namespace troupe
