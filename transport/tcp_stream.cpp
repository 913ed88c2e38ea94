#include "transport/tcp_stream.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` for poll(), never negative.
int remaining_ms(SteadyDeadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000 * 1000));
}

// Waits until `socket` is ready for `events` or `deadline` passes; false then.
bool wait_ready(const Socket& socket, short events, SteadyDeadline deadline) {
  pollfd p{socket.fd(), events, 0};
  for (;;) {
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
    if (rc == 0 && Clock::now() >= deadline) return false;  // poll waits 1000 s at most at a time
  }
}

Error errno_error(const char* what) {
  return make_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

Result<Socket> open_socket(int family) {
  Socket s(socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return errno_error("cannot create a socket");
  return s;
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Socket::~Socket() {
  if (fd_ >= 0) close(fd_);
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

Result<Socket> tcp_listen(const SocketAddress& address, bool* busy) {
  auto s = open_socket(address.family());
  if (!s) return s.error();
  int one = 1;
  setsockopt(s->fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Without this, "::" would also take the IPv4 port that a listener of its own may want.
  if (address.family() == AF_INET6) setsockopt(s->fd(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(s->fd(), address.get(), address.length) != 0 || listen(s->fd(), SOMAXCONN) != 0) {
    if (busy) *busy = errno == EADDRINUSE;
    return errno_error("cannot listen");
  }
  return s;
}

Socket tcp_accept(const Socket& listener) {
  return Socket(accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
}

Result<Socket> tcp_connect(const SocketAddress& address, SteadyDeadline deadline) {
  auto s = open_socket(address.family());
  if (!s) return s.error();
  int one = 1;
  setsockopt(s->fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(s->fd(), address.get(), address.length) != 0) {
    if (errno != EINPROGRESS) return make_error(std::strerror(errno));
    if (!wait_ready(*s, POLLOUT, deadline)) return make_error("connecting timed out");
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(s->fd(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return make_error(std::strerror(error));
  }
  return s;
}

Status send_frame(const Socket& socket, const wire::Frame& frame, SteadyDeadline deadline) {
  const auto* header = reinterpret_cast<const uint8_t*>(&frame.header);
  std::vector<uint8_t> bytes(header, header + sizeof frame.header);
  bytes.insert(bytes.end(), frame.payload.begin(), frame.payload.end());
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = send(socket.fd(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_ready(socket, POLLOUT, deadline)) return make_error("sending a bootstrap frame timed out");
    } else {
      return errno_error("sending a bootstrap frame");
    }
  }
  return {};
}

Result<std::optional<StreamFrame>> FrameReader::read_available(const Socket& socket) {
  for (;;) {
    // Read no further than the frame in hand, so a peer cannot grow the buffer unbounded.
    std::size_t wanted = sizeof(wire::Header);
    if (buffer_.size() >= sizeof(wire::Header)) {
      wire::Header header;
      std::memcpy(&header, buffer_.data(), sizeof header);
      if (header.magic != wire::magic || header.version != wire::version)
        return make_error("not a troupe frame (wrong magic or version)");
      if (header.payload_bytes > payload_bytes_max_)
        return make_error(
            fmt::format("a frame of {} bytes exceeds {}", header.payload_bytes, payload_bytes_max_));
      wanted += header.payload_bytes;
      if (buffer_.size() == wanted) {
        StreamFrame frame{header, std::vector<uint8_t>(buffer_.begin() + sizeof header, buffer_.end())};
        buffer_.clear();
        return std::optional<StreamFrame>(std::move(frame));
      }
    }
    const std::size_t have = buffer_.size();
    buffer_.resize(wanted);
    ssize_t n = recv(socket.fd(), buffer_.data() + have, wanted - have, 0);
    buffer_.resize(have + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == 0) return make_error("closed");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return std::optional<StreamFrame>();
      if (errno != EINTR) return errno_error("reading");
    }
  }
}

Result<StreamFrame> receive_frame(const Socket& socket, FrameReader& reader, SteadyDeadline deadline) {
  for (;;) {
    auto frame = reader.read_available(socket);
    if (!frame) return frame.error();
    if (*frame) return std::move(**frame);
    if (!wait_ready(socket, POLLIN, deadline)) return make_error("no answer");
  }
}

}  // namespace troupe
