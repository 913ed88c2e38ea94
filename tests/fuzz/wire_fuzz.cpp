// libFuzzer target: every control frame decoder must refuse or accept any bytes from
// the wire without reading out of bounds, crashing or allocating without limit.
// The first bytes are taken as the header, the rest as the payload.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe::wire;
  // Half the inputs get a well-formed header, so the fuzzer reaches the payload parsers.
  Header header{};
  size_t header_bytes = sizeof header;
  const uint8_t* payload = data;
  size_t payload_bytes = size;
  if (size > 0 && (data[0] & 1)) {
    header = Header{magic, version, static_cast<uint16_t>(1 + data[0] % 5), 1, 2, size - 1};
    payload = data + 1;
    payload_bytes = size - 1;
  } else if (size >= sizeof header) {
    std::memcpy(&header, data, sizeof header);
    payload = data + sizeof header;
    payload_bytes = size - sizeof header;
  } else {
    header_bytes = size;
  }
  (void)decode_hello(&header, header_bytes, payload, payload_bytes);
  (void)decode_table(&header, header_bytes, payload, payload_bytes);
  (void)decode_reason(Kind::reject, &header, header_bytes, payload, payload_bytes);
  (void)decode_reason(Kind::abort, &header, header_bytes, payload, payload_bytes);
  (void)decode_message(&header, header_bytes, payload, payload_bytes);
  return 0;
}
