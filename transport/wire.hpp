// The wire format of troupe's control frames: UCX active messages whose fixed header
// is one of the structs below and whose payload is raw bytes described by it.
//
// Every frame from the wire is checked (length, magic, version, kind, counts) by the
// decode_* functions before anything uses it; a frame that fails is dropped and logged
// by the caller. Tensor payloads never travel in these frames: they move as UCX tagged
// messages straight between registered buffers (see collective.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe::wire {

constexpr uint32_t magic = 0x54525550;  // "TRUP"
constexpr uint16_t version = 2;
constexpr std::size_t token_bytes_max = 1024;
constexpr std::size_t address_bytes_max = 64 << 10;
constexpr std::size_t reason_bytes_max = 4096;
constexpr std::size_t host_bytes_max = 256;
constexpr int64_t world_size_max = 4096;

/// Active-message handler ids, one per frame kind.
enum class Kind : uint16_t { hello = 1, table = 2, reject = 3, abort = 4, message = 5, heartbeat = 6 };

/// Largest actor message the transport carries (they are control messages, not tensors).
constexpr std::size_t message_bytes_max = 1 << 20;

/// Fixed header that starts every frame.
struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  int64_t rank;        ///< sender's rank
  int64_t world_size;  ///< sender's world size
  uint64_t payload_bytes;
};

/// A rank's process: its pid in the pid namespace of inode `pid_namespace` (0: unknown).
/// Ranks of one host and one namespace watch each other's processes (process_watch.hpp).
struct ProcessId {
  uint64_t pid_namespace = 0;
  int64_t pid = 0;
  bool operator==(const ProcessId& o) const { return pid_namespace == o.pid_namespace && pid == o.pid; }
};

/// A joining rank's introduction to rank 0: its token and UCX worker address.
struct Hello {
  int64_t rank = 0;
  int64_t world_size = 0;
  std::string token;
  std::vector<uint8_t> address;
  std::string host;  ///< which machine the rank runs on (ranks of one host share memory)
  ProcessId process;
};

/// Rank 0's answer once everyone joined: every rank's worker address, host and process, by rank.
struct Table {
  std::vector<std::vector<uint8_t>> addresses;
  std::vector<std::string> hosts;
  std::vector<ProcessId> processes;
};

/// A frame as it goes out: header plus payload bytes.
struct Frame {
  Header header;
  std::vector<uint8_t> payload;
};

Frame encode_hello(const Hello& hello);
Frame encode_table(int64_t world_size, const Table& table);
/// reject (refusal of a hello) and abort (a rank stops the job) carry a reason.
Frame encode_reason(Kind kind, int64_t rank, int64_t world_size, const std::string& reason);

/// An actor message: opaque bytes (the comm agent's envelope) from the sending rank.
Frame encode_message(int64_t rank, int64_t world_size, const std::vector<uint8_t>& bytes);
Result<std::vector<uint8_t>> decode_message(const void* header, std::size_t header_bytes, const void* payload,
                                            std::size_t payload_bytes);

/// Checks the header against the handler's kind and the payload length.
Status check_header(const void* header, std::size_t header_bytes, Kind expected, std::size_t payload_bytes);
Result<Hello> decode_hello(const void* header, std::size_t header_bytes, const void* payload,
                           std::size_t payload_bytes);
Result<Table> decode_table(const void* header, std::size_t header_bytes, const void* payload,
                           std::size_t payload_bytes);
Result<std::string> decode_reason(Kind kind, const void* header, std::size_t header_bytes,
                                  const void* payload, std::size_t payload_bytes);
/// Sender rank of a frame whose header passed check_header.
int64_t header_rank(const void* header);

}  // namespace troupe::wire
