#include "actors/envelope.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <cstring>

namespace troupe {

constexpr std::size_t role_bytes_max = 256;

Result<std::vector<uint8_t>> pack_envelope(caf::actor_system& system, const Envelope& e) {
  if (e.role.size() > role_bytes_max) return make_error("actor role name longer than 256 bytes: " + e.role);
  std::vector<char> body;
  caf::binary_serializer sink{system, body};
  caf::message message = e.message;
  if (auto error = sink(message))
    return make_error("cannot serialize the message for " + e.role + ": " + system.render(error));
  std::vector<uint8_t> out(sizeof(uint32_t) + e.role.size() + sizeof(int64_t) + body.size());
  auto length = static_cast<uint32_t>(e.role.size());
  uint8_t* p = out.data();
  std::memcpy(p, &length, sizeof length);
  p += sizeof length;
  std::memcpy(p, e.role.data(), e.role.size());
  p += e.role.size();
  std::memcpy(p, &e.index, sizeof e.index);
  p += sizeof e.index;
  std::memcpy(p, body.data(), body.size());
  return out;
}

Result<Envelope> unpack_envelope(caf::actor_system& system, const std::vector<uint8_t>& bytes) {
  uint32_t length = 0;
  if (bytes.size() < sizeof length) return make_error("actor message too short for its envelope");
  std::memcpy(&length, bytes.data(), sizeof length);
  if (length > role_bytes_max || bytes.size() < sizeof length + length + sizeof(int64_t))
    return make_error("actor message envelope with a bad role length");
  Envelope e;
  const uint8_t* p = bytes.data() + sizeof length;
  e.role.assign(reinterpret_cast<const char*>(p), length);
  p += length;
  std::memcpy(&e.index, p, sizeof e.index);
  p += sizeof e.index;
  std::size_t rest = bytes.size() - static_cast<std::size_t>(p - bytes.data());
  caf::binary_deserializer source{system, reinterpret_cast<const char*>(p), rest};
  if (auto error = source(e.message))
    return make_error("cannot deserialize a message for " + e.role + ": " + system.render(error));
  return e;
}

}  // namespace troupe
