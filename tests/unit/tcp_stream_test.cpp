// The bootstrap's TCP frames: whole frames out of bytes however they arrive, nothing read
// past what a header may claim, every wait bounded, and both address families.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport/tcp_stream.hpp"
#include "transport/wire.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

SteadyDeadline in(std::chrono::milliseconds ms) {
  return std::chrono::steady_clock::now() + ms;
}

// Two connected non-blocking stream sockets.
std::pair<Socket, Socket> socket_pair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  return {Socket(fds[0]), Socket(fds[1])};
}

std::vector<uint8_t> bytes_of(const wire::Frame& frame) {
  const auto* h = reinterpret_cast<const uint8_t*>(&frame.header);
  std::vector<uint8_t> out(h, h + sizeof frame.header);
  out.insert(out.end(), frame.payload.begin(), frame.payload.end());
  return out;
}

TEST(TcpStream, AFrameArrivingInPiecesIsReadWholeAndTheNextAfterIt) {
  auto [a, b] = socket_pair();
  auto first = wire::encode_reason(wire::Kind::reject, 0, 2, "wrong cluster token");
  auto second = wire::encode_reason(wire::Kind::abort, 1, 2, "stop");
  auto bytes = bytes_of(first);
  FrameReader reader(4096);
  std::size_t sent = 0;
  for (std::size_t at : {std::size_t{5}, sizeof(wire::Header) + 3}) {  // mid-header, mid-payload
    ASSERT_EQ(write(a.fd(), bytes.data() + sent, at - sent), static_cast<ssize_t>(at - sent));
    sent = at;
    auto partial = reader.read_available(b);
    ASSERT_TRUE(partial.ok()) << partial.error().message;
    EXPECT_FALSE(partial->has_value());
  }
  const std::size_t rest_at = sizeof(wire::Header) + 3;
  ASSERT_EQ(write(a.fd(), bytes.data() + rest_at, bytes.size() - rest_at),
            static_cast<ssize_t>(bytes.size() - rest_at));
  ASSERT_TRUE(send_frame(a, second, in(1000ms)).ok());
  auto got = receive_frame(b, reader, in(1000ms));
  ASSERT_TRUE(got.ok()) << got.error().message;
  auto reason = wire::decode_reason(wire::Kind::reject, &got->header, sizeof got->header, got->payload.data(),
                                    got->payload.size());
  ASSERT_TRUE(reason.ok());
  EXPECT_EQ(*reason, "wrong cluster token");
  auto next = receive_frame(b, reader, in(1000ms));
  ASSERT_TRUE(next.ok()) << next.error().message;
  EXPECT_EQ(next->header.kind, static_cast<uint16_t>(wire::Kind::abort));
}

TEST(TcpStream, AHeaderClaimingTooMuchIsRefusedBeforeItsPayloadIsRead) {
  auto [a, b] = socket_pair();
  auto frame = wire::encode_reason(wire::Kind::reject, 0, 2, std::string(200, 'x'));
  ASSERT_TRUE(send_frame(a, frame, in(1000ms)).ok());
  FrameReader reader(100);
  auto got = receive_frame(b, reader, in(1000ms));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message.find("exceeds 100"), std::string::npos) << got.error().message;
}

TEST(TcpStream, BytesThatAreNotATroupeFrameAreRefused) {
  auto [a, b] = socket_pair();
  const std::string http = "GET / HTTP/1.1\r\nHost: rank0\r\nAccept: */*\r\n\r\n";
  ASSERT_EQ(write(a.fd(), http.data(), http.size()), static_cast<ssize_t>(http.size()));
  FrameReader reader(4096);
  auto got = receive_frame(b, reader, in(1000ms));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message.find("not a troupe frame"), std::string::npos) << got.error().message;
}

TEST(TcpStream, APeerClosingMidFrameOrSayingNothingEndsTheWait) {
  auto [a, b] = socket_pair();
  FrameReader reader(4096);
  auto start = std::chrono::steady_clock::now();
  auto silent = receive_frame(b, reader, in(200ms));
  ASSERT_FALSE(silent.ok());
  EXPECT_EQ(silent.error().message, "no answer");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  auto bytes = bytes_of(wire::encode_reason(wire::Kind::reject, 0, 2, "half"));
  ASSERT_EQ(write(a.fd(), bytes.data(), 10), 10);
  a = Socket();
  auto closed = receive_frame(b, reader, in(1000ms));
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.error().message, "closed");
}

SocketAddress loopback(int family, uint16_t port) {
  SocketAddress address;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&address.storage);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    a->sin6_port = htons(port);
    address.length = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&address.storage);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons(port);
    address.length = sizeof *a;
  }
  return address;
}

// The port a listener was given by the kernel (bound to port 0).
uint16_t port_of(const Socket& listener, int family) {
  sockaddr_storage s{};
  socklen_t length = sizeof s;
  getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&s), &length);
  return ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&s)->sin6_port
                                  : reinterpret_cast<sockaddr_in*>(&s)->sin_port);
}

TEST(TcpStream, ListenConnectAndExchangeOverIpv4AndIpv6) {
  for (int family : {AF_INET, AF_INET6}) {
    auto listener = tcp_listen(loopback(family, 0));
    if (!listener && family == AF_INET6) {
      std::printf("no IPv6 loopback here (%s): IPv4 only\n", listener.error().message.c_str());
      continue;
    }
    ASSERT_TRUE(listener.ok()) << listener.error().message;
    const SocketAddress address = loopback(family, port_of(*listener, family));
    EXPECT_EQ(address.text(), family == AF_INET6 ? "[::1]:" + std::to_string(port_of(*listener, family))
                                                 : "127.0.0.1:" + std::to_string(port_of(*listener, family)));
    auto client = tcp_connect(address, in(2000ms));
    ASSERT_TRUE(client.ok()) << client.error().message;
    Socket server;
    for (int i = 0; i < 100 && !server.valid(); ++i) {
      server = tcp_accept(*listener);
      if (!server.valid()) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(server.valid());
    ASSERT_TRUE(send_frame(*client, wire::encode_reason(wire::Kind::reject, 1, 2, "hi"), in(1000ms)).ok());
    FrameReader reader(4096);
    auto got = receive_frame(server, reader, in(1000ms));
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->header.rank, 1);

    bool busy = false;
    auto second = tcp_listen(address, &busy);
    EXPECT_FALSE(second.ok());
    EXPECT_TRUE(busy) << "a taken port says so";
  }
}

TEST(TcpStream, ConnectingWhereNobodyListensFailsAtOnceSayingWhy) {
  uint16_t port = 0;
  {
    auto listener = tcp_listen(loopback(AF_INET, 0));
    ASSERT_TRUE(listener.ok());
    port = port_of(*listener, AF_INET);
  }
  auto client = tcp_connect(loopback(AF_INET, port), in(2000ms));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.error().message, "Connection refused");
}

}  // namespace
}  // namespace troupe
