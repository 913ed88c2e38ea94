// Ports for tests: free ones from the system, never fixed numbers, so that tests running
// in parallel (ctest --parallel, two checkouts on one machine, a busy machine) cannot
// collide on a coordinator port.
//
// A port is taken from 20000-32767 (below Linux's ephemeral range, 32768-60999, so the
// kernel does not hand it to an outgoing connection meanwhile), held by this process
// with an flock on /tmp/troupe-test-ports/PORT until the process ends (so no other test
// process takes it), and checked to bind on 127.0.0.1 right now (so no other program
// holds it). The socket is closed again: the program under test binds it itself.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>

namespace troupe::testing {

namespace detail {

inline bool binds_on_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return ok;
}

// Holds the port's lock file for the rest of this process (the descriptor is never closed).
inline bool lock_for_this_process(int port) {
  const std::string dir = "/tmp/troupe-test-ports";
  ::mkdir(dir.c_str(), 01777);
  ::chmod(dir.c_str(), 01777);
  std::string path = dir + "/" + std::to_string(port);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;
  }
  return true;
}

}  // namespace detail

/// A TCP port on 127.0.0.1 that no other test process holds and nothing has bound now.
/// Aborts the test program (after 10,000 tries) rather than hand out a busy one.
inline int free_port() {
  static std::mutex guard;  // tests may ask from several threads
  std::lock_guard<std::mutex> lock(guard);
  static std::mt19937 pick(std::random_device{}());
  std::uniform_int_distribution<int> range(20000, 32767);
  for (int attempt = 0; attempt < 10000; ++attempt) {
    int port = range(pick);
    if (detail::binds_on_loopback(port) && detail::lock_for_this_process(port) &&
        detail::binds_on_loopback(port))
      return port;
  }
  std::fprintf(stderr, "free_port: no free port in 20000-32767 after 10000 tries\n");
  std::abort();
}

/// "127.0.0.1:<a free port>".
inline std::string free_coordinator() {
  return "127.0.0.1:" + std::to_string(free_port());
}

}  // namespace troupe::testing
