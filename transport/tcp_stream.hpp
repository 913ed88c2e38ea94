// The bootstrap's plain TCP sockets (IPv4 or IPv6) and troupe's control frames over them:
// a frame is its fixed wire::Header followed by the payload bytes the header counts.
//
// Every call is bounded: sockets are non-blocking, and each wait is a poll() that gives up
// at the caller's deadline. Thread safety: one thread per Socket and FrameReader.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/result.hpp"
#include "base/socket_address.hpp"
#include "transport/wire.hpp"

namespace troupe {

using SteadyDeadline = std::chrono::steady_clock::time_point;

/// An owned, non-blocking socket descriptor; closed when dropped.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();

 private:
  int fd_ = -1;
};

/// Listens on `address` (address reuse on; an IPv6 one serves IPv6 only). Fails with
/// strerror's text; `busy` is set when the port is already taken.
Result<Socket> tcp_listen(const SocketAddress& address, bool* busy = nullptr);
/// A connection waiting on `listener`, or an invalid Socket when none is.
Socket tcp_accept(const Socket& listener);
/// Connects to `address` by `deadline`; fails with strerror's text ("Connection refused").
Result<Socket> tcp_connect(const SocketAddress& address, SteadyDeadline deadline);

/// Writes the whole frame by `deadline`.
Status send_frame(const Socket& socket, const wire::Frame& frame, SteadyDeadline deadline);

/// A frame read off a stream: its header, checked for magic and version, and payload.
struct StreamFrame {
  wire::Header header;
  std::vector<uint8_t> payload;
};

/// Gathers one frame at a time from a non-blocking socket's bytes as they arrive.
class FrameReader {
 public:
  /// Frames whose header claims more than `payload_bytes_max` are refused before reading them.
  explicit FrameReader(std::size_t payload_bytes_max) : payload_bytes_max_(payload_bytes_max) {}
  /// Reads what the socket holds now: a whole frame once one is in, nothing while it is
  /// not; an error for a closed connection ("closed") or a malformed header.
  Result<std::optional<StreamFrame>> read_available(const Socket& socket);

 private:
  std::size_t payload_bytes_max_;
  std::vector<uint8_t> buffer_;
};

/// Waits by `deadline` for one whole frame on `socket`.
Result<StreamFrame> receive_frame(const Socket& socket, FrameReader& reader, SteadyDeadline deadline);

}  // namespace troupe
